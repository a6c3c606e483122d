"""The HTML report in a real browser: Debian's Chromium, driven by Playwright (no browser
download: `executable_path`), offline. Skipped where Chromium or Playwright is missing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES, corpus_file

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CAPTURES = [str(SAMPLE_TRACES / name) for name in
            ("classic-phase-lock.pcap", "seed003-nagle.pcap", "classic-2n-blocks-100000.pcap")]


def _report(tmp_path: Path, *captures: str) -> Path:
    path = tmp_path / "report.html"
    result = subprocess.run([sys.executable, "-m", "nagledetect", "report", *captures, "-o", str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return path


def test_report_is_self_contained_and_escapes_capture_paths(tmp_path) -> None:
    hostile = tmp_path / "<img src=x onerror=alert(1)>.pcap"
    shutil.copy(SAMPLE_TRACES / "seed003-nagle.pcap", hostile)
    text = _report(tmp_path, str(hostile)).read_text()
    assert "<img src=x onerror=alert(1)>" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "<script src" not in text and "<link" not in text  # plotly.js is inline; the
    # browser test below checks that no request leaves the file
    assert text.count("<script type='application/json' class='chart'") >= 4


@pytest.mark.skipif(not CHROMIUM, reason="Debian's chromium is not installed")
def test_every_chart_renders_in_chromium_without_console_errors(tmp_path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    path = _report(tmp_path, *CAPTURES)
    errors: list[str] = []
    remote: list[str] = []
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: remote.append(request.url)
                if not request.url.startswith(("file:", "data:")) else None)
        page.goto(path.as_uri())
        page.wait_for_timeout(1500)
        charts = page.query_selector_all(".plotly-graph-div")
        drawn = [chart for chart in charts if chart.query_selector(".main-svg")]
        page.click("table.sortable th:nth-child(10)")
        page.screenshot(path=str(tmp_path / "report.png"))
        browser.close()
    assert len(charts) >= 8 and len(drawn) == len(charts)
    assert errors == [] and remote == []
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_the_accounting_of_several_captures_is_their_totals_and_a_table(tmp_path) -> None:
    """Totals checked against the JSON document of the same captures; one table row a capture."""
    import json
    import re

    captures = [str(SAMPLE_TRACES / name) for name in
                ("seed003-nagle.pcap", "merged-interfaces.pcapng", "trap-rpc.pcap")]
    document = json.loads(subprocess.run(
        [sys.executable, "-m", "nagledetect", "analyze", "--format", "json", *captures],
        capture_output=True, text=True, check=True).stdout)
    read = sum(c["packets"] for c in document["captures"])
    used = sum(c["tcp_packets"] for c in document["captures"])
    page = _report(tmp_path, *captures).read_text()
    accounting = page.split("<h2>Capture accounting</h2>", 1)[1]
    assert accounting.startswith(f"<p>All 3 captures: {read} packets read = {used} TCP used + "
                                 f"{read - used} skipped; 0 with warnings.</p>")
    rows = re.findall(r"<tr><td><code>(.*?)</code>.*?</tr>", accounting)
    assert rows == captures
    # The merged pcapng's interfaces are read natively by the compiled core: no warning.
    assert "own pcapng reader" not in accounting


def test_files_not_analysed_are_listed_errors_first_and_capped(tmp_path, monkeypatch) -> None:
    """Rendered from a document of the sample trace with three files not analysed, the list
    capped at two here: the error comes first, and the note says how many were left off."""
    from nagledetect.analysis import analyze_capture
    from nagledetect.read.inputs import NotAnalysed
    from nagledetect.report import html
    from nagledetect.report.document import build_document

    monkeypatch.setattr(html, "CAPTURES_SHOWN", 2)
    analysis = analyze_capture(str(SAMPLE_TRACES / "seed003-nagle.pcap"))
    not_analysed = [NotAnalysed("a/notes.txt", "not a pcap or pcapng capture", error=False),
                    NotAnalysed("a/b.md5", "not a pcap or pcapng capture", error=False),
                    NotAnalysed("a/cut.pcap", "empty file, not a capture", error=True)]
    page = html.render_html(build_document([analysis], not_analysed), [analysis])
    section = page.split("<h2>Not analysed (3 files)</h2>", 1)[1].split("</ul>", 1)[0]
    assert section == ("<ul><li>error: <code>a/cut.pcap</code>: empty file, not a capture</li>"
                       "<li>left out: <code>a/notes.txt</code>: not a pcap or pcapng capture</li>")
    assert "files not analysed: 2 of 3, errors first" in page


def test_a_capture_without_tcp_gets_a_report_with_an_empty_flow_table(tmp_path) -> None:
    """zeek/dns-caa.pcap holds no TCP (`tcpdump -nr FILE tcp` prints nothing): the report
    says there is no stall, lists no connection, and is still written (the connections its
    table shows are made by id, and there are none)."""
    text = _report(tmp_path, str(corpus_file("zeek/dns-caa.pcap"))).read_text()
    assert "No findings." in text
    assert "<td>" not in text.split("<h2>Connections</h2>")[1].split("</table>")[0]


def _charts(page: str) -> list[dict]:
    """Every chart's figure, as the page hands it to plotly.js."""
    import json
    import re

    return [json.loads(text.replace("<\\/", "</")) for text in re.findall(
        r"<script type='application/json' class='chart' data-target='chart-\d+'>(.*?)</script>",
        page, flags=re.S)]


def _points(values) -> int:
    """How many values a trace's array holds: a list, or plotly's typed array (base64 bytes of
    the dtype named)."""
    import base64

    import numpy as np

    if isinstance(values, dict):
        return len(base64.b64decode(values["bdata"])) // np.dtype(values["dtype"]).itemsize
    return len(values)


@pytest.mark.parametrize("captures", [
    ("seed003-nagle.pcap",), ("mixed.pcap",), ("classic-phase-lock.pcap",),
    ("trap-keepalive.pcap",), ("seed003-nagle.pcap", "trap-rpc.pcap"), ("zeek/ssh__ssh.pcap",)],
    ids="+".join)
def test_no_chart_is_drawn_without_data(tmp_path, captures) -> None:
    """Every trace of every chart has points to draw (an x, y or r array with values): a
    chart without data is left out and the page says why."""
    paths = [str(corpus_file(name)) if name.startswith("zeek/") else str(SAMPLE_TRACES / name)
             for name in captures]
    page = _report(tmp_path, *paths).read_text()
    figures = _charts(page)
    assert figures or "Not drawn, for lack of data" in page
    for figure in figures:
        title = figure["layout"]["title"]["text"]
        assert figure["data"], title
        for trace in figure["data"]:
            arrays = [trace[key] for key in ("x", "y", "r") if key in trace]
            assert arrays and all(_points(values) > 0 for values in arrays), (title, trace["name"])


def test_seed003_first_screen_cards_and_charts(tmp_path) -> None:
    """seed003-nagle.pcap (checked in tshark: 39 stalls, frames 40 -> 41 -> 42 the first, every
    exchange about 41 ms; the receiver's phase is not locked, p = 0.99; no message of 2+
    segments stalls): the headline, the bar, one Nagle card with its reasons, warning, one fix
    and its filter; the idle/stop-and-wait line numbered 2; no phase or parity chart."""
    import numpy as np

    page = _report(tmp_path, str(SAMPLE_TRACES / "seed003-nagle.pcap")).read_text()
    assert "39 Nagle/delayed-ACK stalls cost 1.619 s" in page
    assert "<h2>Time by cause</h2>" in page and "Nagle family <b>1.619 s</b>" in page
    card = page.split("<div class='finding'>", 1)[1].split("<div class='finding folded'>")[0]
    assert "1. Nagle / delayed-ACK stall" in card and "Why we think so" in card
    assert "frame 40 last data &rarr; frame 41 ACK (+41.0 ms hold) &rarr; frame 42" in card
    assert "tinygram flood" in card and card.count("Recommended fix") == 1
    assert "<details><summary>3 other fixes</summary>" in card
    assert "tcp.stream eq 0 &amp;&amp; frame.number in {40..42, 45..47," in card
    assert "class='copy'" in card
    assert "<div class='finding folded'><b>2.</b> Idle and stop-and-wait" in page
    options = page.split("<select id='lang'>", 1)[1].split("</select>", 1)[0]
    assert options.count("<option>") == 7 and "<option>.NET</option>" in options
    titles = [figure["layout"]["title"]["text"] for figure in _charts(page)]
    assert not any("phase" in title.lower() or "parity" in title.lower() for title in titles)
    assert "none with delayed ACKs locked to a clock tick" in page
    latency = next(f for f in _charts(page) if f["layout"]["title"]["text"].startswith("Exchange"))
    exchanges = latency["data"][0]
    xs = np.array([x for x in exchanges["x"] if x is not None], dtype=float)
    ys = np.array([y for x, y in zip(exchanges["x"], exchanges["y"]) if x is not None], dtype=float)
    assert 35 < xs[np.argmax(ys)] < 50  # the mode of the exchanges is the 40 ms timer


def test_gap_cards_show_two_frames_not_a_fake_ack(tmp_path) -> None:
    """trap-think-200ms.pcap: think-time gaps end when the next data leaves; nothing released
    them, so their evidence is 'last data -> next data', never an ACK frame repeated."""
    page = _report(tmp_path, str(SAMPLE_TRACES / "trap-think-200ms.pcap")).read_text()
    import re

    assert "next data: gap" in page
    for first, second in re.findall(r"frame (\d+) ACK[^&]*&rarr; frame (\d+) released", page):
        assert first != second


def test_a_folder_report_numbers_its_cards_without_gaps(tmp_path) -> None:
    """Over several captures the cards and the folded lines are numbered 1, 2, 3, ... as
    shown, whatever the document's ranks of the findings left out."""
    import re

    names = ["seed003-nagle.pcap", "mixed.pcap", "trap-rpc.pcap", "trap-think-40ms.pcap"]
    page = _report(tmp_path, *[str(SAMPLE_TRACES / name) for name in names]).read_text()
    ranks = [int(rank) for rank in re.findall(r"<div class='(?:head(?: nagle)?|finding folded)'>"
                                               r"<b>(\d+)\.", page)]
    assert ranks == list(range(1, len(ranks) + 1)) and len(ranks) > 4
