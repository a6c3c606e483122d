"""The HTML report for ops teams: one self-contained file (plotly.js embedded once, no network).

It renders the result document and draws the charts from what the analysis gathered for them
(`chart_data`: counts and sampled points, complete for a capture analysed in parts too); it
decides nothing. Every string that came from a capture or the command line is escaped; charts
carry numbers and endpoint names only.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from itertools import islice
from typing import Any

from plotly.offline import get_plotlyjs

from nagledetect.analysis import Analysis
from nagledetect.chart_data import MAX_POINTS, WORST_CONNECTIONS
from nagledetect.chunked import take
from nagledetect.report.document import connection_position
from nagledetect.report.html_cards import (
    LANGUAGE_SCRIPT,
    cards,
    language_picker,
    time_by_cause,
)
from nagledetect.report.html_charts import ChartSet, charts
from nagledetect.report.text import (
    KIND_TITLES,
    AccountingTotals,
    StallTotals,
    diagnosis,
    in_capture,
    stalls_by_connection,
)

MAX_TABLE_ROWS = 2_000
MAX_FINDINGS_SHOWN = 50
CAPTURES_SHOWN = 2_000
"""Captures in the accounting table, as many as connections in theirs."""
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em} h2{margin-top:1.6em;border-bottom:1px solid #ccc}
.verdict{font-size:1.3em;padding:.8em;background:#fff4e5;border-left:6px solid #e67e22}
.verdict.ok{background:#eafaf1;border-color:#27ae60}
table{border-collapse:collapse;font-size:.85em} td,th{padding:.25em .6em;border-bottom:1px solid #eee}
th{cursor:pointer;background:#f6f6f6;text-align:left}
.finding{margin:1em 0;padding:.6em 1em;border:1px solid #ddd;border-radius:6px}
.finding p{margin:.4em 0} .finding ul{margin:.2em 0} .head{font-size:1.05em}
.head.nagle b{color:#b71c1c} .finding.folded,.finding.short{color:#444;font-size:.9em}
.warn{background:#fff8e1;border-left:4px solid #f9a825;padding:.3em .6em}
.fix{margin:.5em 0;padding:.4em .7em;background:#f4f8fc;border-radius:4px}
.fix.first{border-left:4px solid #1f77b4} .evidence{font-size:.85em;color:#444}
pre.code{background:#272822;color:#f8f8f2;padding:.5em .8em;border-radius:4px;
white-space:pre-wrap;margin:.4em 0}
.filter{font-size:.85em;margin-top:.5em} .filter code{background:#f1f1f1;padding:.1em .3em;
word-break:break-all} button.copy{font-size:.85em;margin-left:.4em}
.causes{display:flex;height:2em;border:1px solid #ccc;border-radius:4px;overflow:hidden}
.causes div{min-width:2px} .legend .key{margin-right:1.2em;white-space:nowrap}
.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}
.pick{margin:1em 0} .note{color:#666;font-size:.85em} code{font-size:.9em}
"""
CHART_SCRIPT = """
document.querySelectorAll('script.chart').forEach(function(data){
  var figure = JSON.parse(data.textContent);
  Plotly.newPlot(data.dataset.target, figure.data, figure.layout,
                 {displaylogo: false, responsive: true});
});
"""
SORT_SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function(th, column){
  th.addEventListener('click', function(){
    var table = th.closest('table'), body = table.tBodies[0];
    var rows = Array.from(body.rows), ascending = th.dataset.order !== 'asc';
    rows.sort(function(a, b){
      var x = a.cells[column].dataset.v || a.cells[column].textContent;
      var y = b.cells[column].dataset.v || b.cells[column].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return ascending ? c : -c;
    });
    th.dataset.order = ascending ? 'asc' : 'desc';
    rows.forEach(function(r){ body.appendChild(r); });
  });
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table_connections(connections: Sequence[dict[str, Any]],
                       stalls: StallTotals, notes: list[str]
                       ) -> list[dict[str, Any]]:
    """The MAX_TABLE_ROWS connections with the most stall time (ties and the rest by id); only
    their entries are made."""
    if len(connections) > MAX_TABLE_ROWS:
        notes.append(f"flow table: the {MAX_TABLE_ROWS:,} connections with the most stall time of "
                     f"{len(connections):,} (all are in the JSON output)")
    lost_at = {connection_position(connections, *key): lost for key, (_, lost) in stalls.items()}
    stalled = sorted(lost_at, key=lambda c: (-lost_at[c], c))[:MAX_TABLE_ROWS]
    chosen = set(stalled)
    others = (c for c in range(len(connections)) if c not in chosen)
    positions = stalled + list(islice(others, MAX_TABLE_ROWS - len(stalled)))
    entries = dict(zip(sorted(positions), take(connections, sorted(positions))))
    return [entries[c] for c in positions]


def _flow_table(document: dict[str, Any], stalls: list[dict[str, Any]], notes: list[str]) -> str:
    head = ("<tr><th>id</th><th>client</th><th>server</th><th>packets</th><th>bytes</th>"
            "<th>MSS</th><th>vantage</th><th>RTT ms</th><th>stalls</th><th>lost s</th></tr>")
    by_connection = stalls_by_connection(stalls)
    rows = []
    for c in _table_connections(document["connections"], by_connection, notes):
        count, lost = by_connection.get((c["capture"], c["id"]), (0, 0.0))
        rtt = "" if c["rtt_ms"] is None else f"{c['rtt_ms']:.3f}"
        rows.append(f"<tr><td>{c['id']}</td><td>{_e(c['client'])}</td><td>{_e(c['server'])}</td>"
                    f"<td>{sum(c['packets'].values())}</td><td>{sum(c['bytes'].values())}</td>"
                    f"<td>{c['mss']}</td><td>{_e(c['vantage'])}</td><td>{rtt}</td>"
                    f"<td>{count}</td><td>{lost:.3f}</td></tr>")
    return f"<table class='sortable'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _accounting(document: dict[str, Any], notes: list[str]) -> str:
    """Over several captures, their totals, then a sortable table of the captures (at most
    CAPTURES_SHOWN, those with warnings chosen first); one capture as a line and its lists."""
    captures = document["captures"]
    if len(captures) == 1:
        return _one_capture_accounting(captures[0])
    totals = AccountingTotals.of(captures, CAPTURES_SHOWN)
    shown = totals.shown
    if len(shown) < len(captures):
        notes.append(f"capture accounting: {len(shown):,} of {len(captures):,} captures, those "
                     "with warnings first (the JSON document has every one)")
    reasons = "".join(f"<li>{_e(reason)}: {count}</li>"
                      for reason, count in totals.skipped.most_common())
    head = ("<tr><th>capture</th><th>link type</th><th>packets read</th><th>TCP used</th>"
            "<th>skipped</th><th>warnings</th></tr>")
    rows = "".join(
        f"<tr><td><code>{_e(c['path'])}</code></td><td>{_e(c['link_type_name'])}</td>"
        f"<td>{c['packets']}</td><td>{c['tcp_packets']}</td><td>{sum(c['skipped'].values())}"
        f"</td><td>{'<br>'.join(_e(w) for w in c['warnings'])}</td></tr>" for c in shown)
    return (f"<p>All {len(captures)} captures: {totals.read} packets read = {totals.used} TCP "
            f"used + {sum(totals.skipped.values())} skipped; {totals.warned} with warnings.</p>"
            f"<ul>{reasons}</ul><table class='sortable'><thead>{head}</thead><tbody>{rows}"
            "</tbody></table>")


def _one_capture_accounting(capture: dict[str, Any]) -> str:
    skipped = "".join(f"<li>{_e(reason)}: {count}</li>"
                      for reason, count in capture["skipped"].items())
    warnings = "".join(f"<li>warning: {_e(w)}</li>" for w in capture["warnings"])
    return (f"<p><code>{_e(capture['path'])}</code> ({_e(capture['link_type_name'])}): "
            f"{capture['packets']} packets read = {capture['tcp_packets']} TCP used + "
            f"{sum(capture['skipped'].values())} skipped</p><ul>{skipped}{warnings}</ul>")


def _not_analysed(document: dict[str, Any], notes: list[str]) -> str:
    """The files not analysed, as the document lists them (errors first), at most
    CAPTURES_SHOWN (an archive may hold a checksum file beside each capture)."""
    entries = document["not_analysed"]
    if not entries:
        return ""
    shown = entries[:CAPTURES_SHOWN]
    if len(shown) < len(entries):
        notes.append(f"files not analysed: {len(shown):,} of {len(entries):,}, errors first (the "
                     "JSON document has every one)")
    items = "".join(f"<li>{'error' if entry['error'] else 'left out'}: <code>{_e(entry['path'])}"
                    f"</code>: {_e(entry['reason'])}</li>" for entry in shown)
    files = f"{len(entries)} file{'s' if len(entries) > 1 else ''}"
    return f"<h2>Not analysed ({files})</h2><ul>{items}</ul>"


def _verdict(document: dict[str, Any], stalls: list[dict[str, Any]]) -> str:
    unreadable = sum(entry["error"] for entry in document["not_analysed"])
    warning = (f"<div class='verdict'>{unreadable} of the run's files could not be analysed: "
               "see <em>Not analysed</em> below.</div>" if unreadable else "")
    return warning + _stall_verdict(document, stalls)


def _stall_verdict(document: dict[str, Any], stalls: list[dict[str, Any]]) -> str:
    """The document's headline, as the terminal's first line (on green where nothing waited),
    and where there are Nagle-family stalls, the worst one's place."""
    headline = document["headline"]
    text = _e(headline["text"])
    if not stalls:
        plain = "" if headline["largest_other_delays"] else " ok"
        return f"<div class='verdict{plain}'>{text}</div>"
    worst = max(stalls, key=lambda f: f["time_lost_s"])
    return (f"<div class='verdict'>{text} The worst: {_e(KIND_TITLES[worst['kind']])} on "
            f"connection {worst['connection']}{_e(in_capture(document, worst))}, "
            f"{_e(worst['sender'])} to {_e(worst['receiver'])}.</div>")


def _charts(drawn: ChartSet) -> str:
    """Each chart's figure as JSON beside the element it is drawn in (CHART_SCRIPT draws them)."""
    parts = [f"<div class='plotly-graph-div' id='chart-{index}'></div>"
             f"<script type='application/json' class='chart' data-target='chart-{index}'>"
             f"{chart.json()}</script>" for index, chart in enumerate(drawn.charts)]
    if drawn.not_drawn:
        parts.append("<p class='note'>Not drawn, for lack of data:</p><ul class='note'>"
                     + "".join(f"<li>{_e(why)}</li>" for why in drawn.not_drawn) + "</ul>")
    return "".join(parts)


def _caps_line() -> str:
    return (f"<p class='note'>Limits of this page: time-sequence graphs of the "
            f"{WORST_CONNECTIONS} connections with the most stall time, up to {MAX_POINTS:,} "
            f"points a trace (more are evenly sampled); {MAX_FINDINGS_SHOWN} findings, "
            f"{MAX_TABLE_ROWS:,} connections and {CAPTURES_SHOWN:,} captures listed. The JSON "
            "output (<code>--format json</code>) has everything.</p>")


def render_html(document: dict[str, Any], analyses: list[Analysis]) -> str:
    """The whole report as one HTML page, from analyses made with their charts."""
    if any(analysis.charts is None for analysis in analyses):
        raise ValueError("the HTML report draws charts the analysis gathers: analyse with "
                         "charts=True")
    notes: list[str] = []
    found = diagnosis(document["findings"], MAX_FINDINGS_SHOWN)
    findings = cards(document, found, notes, CAPTURES_SHOWN)
    drawn = charts(document, analyses)
    notes += drawn.notes
    table = _flow_table(document, found.stalls, notes)
    accounting = _accounting(document, notes)
    not_analysed = _not_analysed(document, notes)
    sampled = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>nagledetect report</title><style>{STYLE}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<h1>nagledetect report</h1>{_verdict(document, found.stalls)}"
        f"{time_by_cause(document)}"
        "<h2>Findings: the Nagle family first, then other causes, each by time lost</h2>"
        f"{language_picker() if document['advice'] else ''}{findings}"
        f"<h2>Charts</h2>{_charts(drawn)}"
        + (f"<p class='note'>Shown in part:</p><ul class='note'>{sampled}</ul>" if sampled else "")
        + f"{_caps_line()}"
        f"<h2>Connections</h2><p class='note'>Click a column to sort.</p>{table}"
        f"{not_analysed}<h2>Capture accounting</h2>{accounting}"
        f"<p class='note'>nagledetect {_e(document['tool']['version'])}, schema "
        f"{_e(document['schema'])}</p><script>{CHART_SCRIPT}{LANGUAGE_SCRIPT}{SORT_SCRIPT}"
        "</script></body></html>")
