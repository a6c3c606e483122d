"""The text report stays readable on big captures: top findings, hosts and connections, with a
line saying how many more there are; --verbose lists them all. The HTML report caps its
findings by the same rule.

Checked against the JSON document of the same run (zeek/ssh__ssh.pcap: 53 findings over 23
connections), not against numbers copied from the text output.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from nagledetect.analysis import analyze_capture
from nagledetect.report.document import build_document
from nagledetect.report.text import CONNECTIONS_SHOWN, FINDINGS_SHOWN, shown_findings
from tests.conftest import corpus_file


def _run(*arguments: str) -> str:
    return subprocess.run([sys.executable, "-m", "nagledetect", "analyze", *arguments],
                          capture_output=True, text=True, check=True).stdout


def test_findings_are_capped_unless_verbose() -> None:
    """Capped, the list keeps every stall the headline counts in sight: ssh__ssh.pcap's 5
    stalls rank 36th to 41st in the JSON, below 35 idle and think-time gaps, and are shown with
    the 15 costliest findings (ranks as in the JSON)."""
    path = str(corpus_file("zeek/ssh__ssh.pcap"))
    document = json.loads(_run("--format", "json", path))
    total = len(document["findings"])
    assert total > FINDINGS_SHOWN
    stall_ranks = [rank for rank, finding in enumerate(document["findings"], start=1)
                   if finding["kind"] == "nagle-delack-stall"]
    assert len(stall_ranks) == 5 and min(stall_ranks) > FINDINGS_SHOWN
    ranks = re.compile(r"^ *(\d+)\. ", re.MULTILINE)
    default = _run(path)
    shown = [int(r) for r in ranks.findall(default)]
    assert shown == list(range(1, FINDINGS_SHOWN - 5 + 1)) + stall_ranks
    hidden = [finding["kind"] for rank, finding in enumerate(document["findings"], start=1)
              if rank not in shown]
    not_nagle = sum(kind in ("idle", "think-time", "loss-recovery", "zero-window")
                    for kind in hidden)
    assert (f"... and {total - FINDINGS_SHOWN} more findings ({len(hidden) - not_nagle} "
            f"Nagle-related, each costing less time than those above; {not_nagle} not caused by "
            "Nagle;") in default
    verbose = _run("--verbose", path)
    assert [int(r) for r in ranks.findall(verbose)] == list(range(1, total + 1))
    assert "more findings" not in verbose
    assert len(document["connections"]) <= CONNECTIONS_SHOWN
    assert "more connections" not in default


def test_html_findings_list_keeps_the_stalls_in_sight(monkeypatch) -> None:
    """The HTML report caps its findings by the same rule: with room for 20, ssh__ssh.pcap's
    stalls (36th to 41st by time lost in the JSON) are listed under their ranks."""
    from nagledetect.analysis import analyze_capture
    from nagledetect.report import html
    from nagledetect.report.document import build_document

    analysis = analyze_capture(str(corpus_file("zeek/ssh__ssh.pcap")))
    document = build_document([analysis])
    monkeypatch.setattr(html, "MAX_FINDINGS_SHOWN", FINDINGS_SHOWN)
    page = html.render_html(document, [analysis])
    listed = [int(rank) for rank in re.findall(r"<div class='finding'><b>(\d+)\. ", page)]
    stall_ranks = [rank for rank, finding in enumerate(document["findings"], start=1)
                   if finding["kind"] == "nagle-delack-stall"]
    assert listed == list(range(1, FINDINGS_SHOWN - len(stall_ranks) + 1)) + stall_ranks
    assert f"findings: {FINDINGS_SHOWN} of {len(document['findings'])} are listed" in page


def test_capture_accounting_of_many_captures_is_totals_and_twenty_captures() -> None:
    """All the sample traces (more than twenty): the totals are the JSON document's sums, the
    captures with warnings are all shown (the merged pcapng's reader warning among them), and
    the rest are counted; --verbose lists every capture."""
    from nagledetect.report.text import CAPTURES_SHOWN
    from tests.conftest import SAMPLE_TRACES

    paths = sorted(str(path) for path in SAMPLE_TRACES.glob("*.pcap*"))
    assert len(paths) > CAPTURES_SHOWN
    document = json.loads(_run("--format", "json", *paths))
    text = _run(*paths).split("CAPTURE ACCOUNTING\n", 1)[1]
    captures = document["captures"]
    read = sum(capture["packets"] for capture in captures)
    used = sum(capture["tcp_packets"] for capture in captures)
    warned = [capture["path"] for capture in captures if capture["warnings"]]
    assert text.startswith(f"  all {len(captures)} captures: {read} packets read = {used} TCP "
                           f"used + {read - used} skipped; {len(warned)} with warnings\n")
    capture_lines = [line for line in text.splitlines() if line.startswith(f"  {SAMPLE_TRACES}")]
    assert len(capture_lines) == CAPTURES_SHOWN
    assert 0 < len(warned) < CAPTURES_SHOWN
    assert all(any(line.startswith(f"  {path} (") for line in capture_lines) for path in warned)
    assert f"... and {len(captures) - CAPTURES_SHOWN} more captures" in text
    verbose = _run("-v", *paths).split("CAPTURE ACCOUNTING\n", 1)[1]
    assert len([line for line in verbose.splitlines()
                if line.startswith(f"  {SAMPLE_TRACES}")]) == len(captures)


def test_the_findings_shown_are_the_documents_entries_at_their_ranks() -> None:
    """The reports pick the findings they show by the document's kinds and times, and read only
    those and the stalls (`shown_findings`). Over two captures whose findings interleave in
    rank, ssh__ssh.pcap analysed in 6 parts (its findings read back from disk with capture-wide
    ids, its stalls scored again) and ftp__cwd-navigation.pcap, they are the entries of the
    document read in order, at their ranks, and the same as picked from a list of them."""
    ssh, ftp = corpus_file("zeek/ssh__ssh.pcap"), corpus_file("zeek/ftp__cwd-navigation.pcap")
    analyses = [analyze_capture(str(ssh), part_bytes=ssh.stat().st_size // 6 + 1),
                analyze_capture(str(ftp))]
    findings = build_document(analyses)["findings"]
    every = list(findings)
    captures = [finding["capture"] for finding in every]
    assert captures != sorted(captures) and captures != sorted(captures, reverse=True)
    stalls: list = []
    picked = shown_findings(findings, 10, stalls)
    shown = picked[0]
    assert [finding for _, finding in shown] == [every[rank - 1] for rank, _ in shown]
    assert len(shown) == 10 and picked[1] + picked[2] == len(every) - 10
    assert stalls == [finding for finding in every if finding["kind"] == "nagle-delack-stall"]
    assert {finding["capture"] for finding in stalls} == {0, 1}
    from_list: list = []
    assert shown_findings(every, 10, from_list) == picked
    assert from_list == stalls
