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
from nagledetect.detectors import kinds
from nagledetect.report.document import build_document
from nagledetect.report.text import CONNECTIONS_SHOWN, FINDINGS_SHOWN, diagnosis
from tests.conftest import SAMPLE_TRACES, corpus_file

RANKS = re.compile(r"^ *(\d+)(?:-(\d+))?\. ", re.MULTILINE)
SSH_STALLS = [(962, 963, 964), (1396, 1397, 1398), (991, 992, 993), (59, 60, 61),
              (716, 717, 718), (886, 887, 888), (220, 221, 222), (113, 114, 115),
              (594, 595, 596)]
"""ssh__ssh.pcap's 9 stalls, costliest first. Checked in tshark (-T fields -e frame.number -e
frame.time_relative -e tcp.stream -e tcp.len): each is a 16-byte segment, the peer's pure ACK
and a 40-52-byte segment 7-945 us after it, on tcp.stream 20, 22, 21, 1, 15, 18, 4, 2 and 13;
the first frame to the third: 93.387, 89.488, 87.062, 71.960, 64.386, 50.902, 38.582, 37.572
and 37.570 ms, 570.909 ms in all. The first four are on paths of 35-45 ms (SYN to SYN/ACK,
the tap at the client: stream 20, frames 945-946, 44.9 ms), their ACKs held 37-51 ms beyond
it: less than one and a half round trips, more than an ordinary ACK's lag."""


def _run(*arguments: str) -> str:
    return subprocess.run([sys.executable, "-m", "nagledetect", "analyze", *arguments],
                          capture_output=True, text=True, check=True).stdout


def _ranks(text: str) -> list[int]:
    """The ranks the diagnosis lists (a folded line's range counted in full)."""
    return [rank for first, last in RANKS.findall(text.split("\nHOW TO FIX\n")[0])
            for rank in range(int(first), int(last or first) + 1)]


def _diagnosis_order_holds(findings: list[dict]) -> int:
    """Assert that the findings come in the diagnosis's order (the Nagle family, the other
    named causes, each by time lost; the patterns; then idle and stop-and-wait), and return how
    many are of the Nagle family."""
    groups = [0 if kinds.is_nagle_family(finding["kind"]) else
              1 if finding["kind"] in kinds.OTHER_GAP_CAUSES and finding["kind"] != kinds.IDLE
              else 3 if finding["kind"] in kinds.NOT_LOST else 2 for finding in findings]
    assert groups == sorted(groups)
    for group in (0, 1):
        times = [finding["time_lost_s"] for finding, of in zip(findings, groups) if of == group]
        assert times == sorted(times, reverse=True)
    return groups.count(0)


def test_the_diagnosis_leads_with_the_stalls_and_folds_idle_time() -> None:
    """ssh__ssh.pcap: its 9 delayed-ACK stalls (`SSH_STALLS`) and the rest of the Nagle family
    lead the JSON's findings and the text's diagnosis (though idle and think-time gaps lost
    more time each), more of them than the text lists one by one; then the other named causes
    by time lost; then the idle connections and stop-and-wait ones in one line, never
    called lost (the longest idle, tcp.stream 14: frames 654 -> 656, 664 -> 666, 667 -> 669
    and 681 -> 683, 151.3 ms + 3.950 s + 2.840 s + 625.7 ms = 7.567 s in tshark)."""
    path = str(corpus_file("zeek/ssh__ssh.pcap"))
    document = json.loads(_run("--format", "json", path))
    findings = document["findings"]
    family = _diagnosis_order_holds(findings)
    stalls = [(event["last_data_frame"], event["delayed_ack_frame"], event["released_frame"])
              for finding in findings[:family] for event in finding["events"]
              if finding["kind"] == kinds.NAGLE_DELACK_STALL]
    assert stalls == SSH_STALLS
    folded = [finding for finding in findings if finding["kind"] in kinds.NOT_LOST]
    listed = len(findings) - len(folded)
    assert listed > family > FINDINGS_SHOWN
    default = _run(path)
    assert default.startswith(document["headline"]["text"] + "\n")
    assert "9 Nagle/delayed-ACK stalls (570.9 ms)" in document["headline"]["text"]
    assert _ranks(default) == (list(range(1, FINDINGS_SHOWN + 1))
                               + list(range(listed + 1, len(findings) + 1)))
    assert (f"... and {listed - FINDINGS_SHOWN} more findings ({family - FINDINGS_SHOWN} "
            "Nagle-family, each costing less time than those above; "
            f"{listed - family} of other causes, not Nagle; --verbose lists them all") in default
    idle = [finding["time_lost_s"] for finding in folded if finding["kind"] == kinds.IDLE]
    assert (f"{listed + 1}-{len(findings)}. Idle and stop-and-wait (not Nagle): {len(idle)} "
            f"connections idle {sum(idle):.3f} s in all, the longest 7.567 s (nobody was "
            f"waiting: not time lost); {len(folded) - len(idle)} connections exchanging "
            "stop-and-wait, one message at a time.\n") in default
    verbose = _run("--verbose", path)
    assert _ranks(verbose) == list(range(1, len(findings) + 1)) + list(
        range(listed + 1, len(findings) + 1))
    assert "more findings" not in verbose
    assert (f"{listed + 1}. Idle: nobody waiting (not Nagle) on connection 14: 7.567 s idle (89% "
            "of the connection)") in verbose
    assert not re.search(r"[Ii]dle\b.* s lost", verbose)
    assert len(document["connections"]) <= CONNECTIONS_SHOWN
    assert "more connections" not in default


def test_html_findings_list_leads_with_the_stalls_and_folds_idle_time(monkeypatch) -> None:
    """The HTML report lists the findings in the text's order, capped: with room for 20,
    ssh__ssh.pcap's Nagle family (its 9 stalls checked above among it) comes first, then the
    other named causes (think time, a retried handshake), then the idle and stop-and-wait
    line."""
    from nagledetect.report import html

    analysis = analyze_capture(str(corpus_file("zeek/ssh__ssh.pcap")))
    document = build_document([analysis])
    findings = list(document["findings"])
    family = _diagnosis_order_holds(findings)
    folded = sum(finding["kind"] in kinds.NOT_LOST for finding in findings)
    shown = 20
    monkeypatch.setattr(html, "MAX_FINDINGS_SHOWN", shown)
    page = html.render_html(document, [analysis])
    listed = re.findall(r"<div class='finding(?: short)?'><div class='head[^']*'><b>(\d+)\. "
                        r"([^<]+?)(?: \([a-z-]+\))?</b>", page)
    assert [int(rank) for rank, _ in listed] == list(range(1, shown + 1))
    titles = [title for _, title in listed]
    assert titles.count("Nagle / delayed-ACK stall") == 9
    assert set(titles[:family]) <= {"Nagle / delayed-ACK stall", "Nagle hold for one round trip",
                                    "Small-message stream coalescing (Nagle)"}
    assert "Application think time (not Nagle)" in titles[family:]
    assert all(title.endswith("(not Nagle)") for title in titles[family:])
    # The page numbers what it shows, 1 to n without gaps: the folded line comes next.
    assert (f"<div class='finding folded'><b>{shown + 1}.</b> Idle and "
            "stop-and-wait (not Nagle): ") in page
    assert f"findings: {shown} of {len(findings) - folded} are listed" in page
    assert "idle" not in "".join(re.findall(r"s lost[^<]*", page))


def test_capture_accounting_of_many_captures_is_totals_and_twenty_captures() -> None:
    """All the sample traces (more than twenty): the totals are the JSON document's sums, the
    captures with warnings are all shown (the merged pcapng's reader warning among them), and
    the rest are counted; --verbose lists every capture."""
    from nagledetect.report.text import CAPTURES_SHOWN

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
    """The reports pick the findings they list by the document's kinds and times, and read only
    those (`diagnosis`); the Nagle family comes from the document, read once for its headline.
    Over two captures whose findings interleave, ssh__ssh.pcap analysed in 6 parts (its
    findings read back from disk with capture-wide ids, its stalls scored again) and
    seed003-nagle.pcap, they are the entries of the document read in order, at their
    ranks, and the same as picked from a list of them; each capture's idle and stop-and-wait
    findings are neighbours at the end, folded into one line."""
    ssh, seed003 = corpus_file("zeek/ssh__ssh.pcap"), SAMPLE_TRACES / "seed003-nagle.pcap"
    analyses = [analyze_capture(str(ssh), part_bytes=ssh.stat().st_size // 6 + 1),
                analyze_capture(str(seed003))]
    findings = build_document(analyses)["findings"]
    every = list(findings)
    _diagnosis_order_holds(every)
    captures = [finding["capture"] for finding in every]
    assert captures != sorted(captures) and captures != sorted(captures, reverse=True)
    picked = diagnosis(findings, 10)
    assert [finding for _, finding in picked.shown] == every[:10]
    assert [rank for rank, _ in picked.shown] == list(range(1, 11))
    family = [finding for finding in every if kinds.is_nagle_family(finding["kind"])]
    assert every[:len(family)] == family
    # Kept for every Nagle-family finding, each is cut to what the headline and the
    # connection tables read.
    summary_keys = ("kind", "subkind", "capture", "connection", "sender", "receiver", "count",
                    "time_lost_s", "advice")
    assert list(picked.stalls) == [
        {**{key: finding[key] for key in summary_keys},
         "details": {name: finding["details"][name]
                     for name in ("time_lost_upper_bound", "not_nagles")}}
        for finding in family]
    assert [(stall["sender"], stall["count"], stall["time_lost_s"]) for stall in picked.stalls] \
        == [(finding["sender"], finding["count"], finding["time_lost_s"]) for finding in family]
    assert "display_filter" not in picked.stalls[0] and "confidence" not in picked.stalls[0]
    assert {finding["capture"] for finding in family} == {0, 1}
    for line in picked.folded:
        folded = [every[rank - 1] for rank in line.ranks]
        assert line.ranks == list(range(line.ranks[0], line.ranks[-1] + 1))
        assert {finding["capture"] for finding in folded} == {line.capture}
        assert line.idle == sum(finding["kind"] == kinds.IDLE for finding in folded)
        assert line.stop_and_wait == len(folded) - line.idle
    assert [line.capture for line in picked.folded] == [0, 1]
    assert picked.folded[-1].ranks[-1] == len(every)
    assert sum(picked.left_out.values()) == len(every) - 10 - sum(
        len(line.ranks) for line in picked.folded)
    from_list = diagnosis(every, 10)
    assert (from_list.shown, from_list.folded, from_list.left_out) == (
        picked.shown, picked.folded, picked.left_out)
    assert from_list.stalls == family
