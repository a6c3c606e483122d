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
    """Totals checked against the JSON document of the same captures; one table row a capture,
    the merged pcapng's reader warning in its row."""
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
                                 f"{read - used} skipped; 1 with warnings.</p>")
    rows = re.findall(r"<tr><td><code>(.*?)</code>.*?</tr>", accounting)
    assert rows == captures
    assert "nagledetect&#x27;s own pcapng reader" in accounting.split(captures[1], 1)[1]


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
