"""The HTML report for ops teams: one self-contained file (plotly.js embedded once, no network).

It renders the result document and draws the charts from what the analysis gathered for them
(`chart_data`: counts and sampled points, complete for a capture analysed in parts too); it
decides nothing. Every string that came from a capture or the command line is escaped; charts
carry numbers and endpoint names only.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from nagledetect.analysis import Analysis
from nagledetect.chart_data import (
    MAX_HOST_CHARTS,
    WORST_CONNECTIONS,
    HostCharts,
    LogHistogram,
    SizeCounts,
    TimeSequence,
    Trace,
)
from nagledetect.detectors import kinds
from nagledetect.detectors.model import HostProfile
from nagledetect.report.document import connection_position
from nagledetect.report.headline import is_upper_bound
from nagledetect.report.text import (
    KIND_TITLES,
    AccountingTotals,
    Diagnosis,
    StallTotals,
    diagnosis,
    folded_line,
    in_capture,
    stalls_by_connection,
)
from nagledetect.stored import take

CHART_TEMPLATE = "plotly_white"
MAX_TABLE_ROWS = 2_000
MAX_FINDINGS_SHOWN = 50
CAPTURES_SHOWN = 2_000
"""Captures in the accounting table, as many as connections in theirs."""
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em} h2{margin-top:2em;border-bottom:1px solid #ccc}
.verdict{font-size:1.3em;padding:.8em;background:#fff4e5;border-left:6px solid #e67e22}
.verdict.ok{background:#eafaf1;border-color:#27ae60}
table{border-collapse:collapse;font-size:.85em} td,th{padding:.25em .6em;border-bottom:1px solid #eee}
th{cursor:pointer;background:#f6f6f6;text-align:left} .finding{margin:1em 0;padding:.6em 1em;
border:1px solid #ddd;border-radius:6px} .note{color:#666;font-size:.85em} code{font-size:.9em}
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


@contextmanager
def _white_charts() -> Iterator[None]:
    """Figures made meanwhile take the "plotly_white" template as their default. Named in each
    figure's layout instead, plotly checked a copy of the whole template for every figure: 20 ms
    each, a third of a second a report; the page's charts are the same."""
    default = pio.templates.default
    pio.templates.default = CHART_TEMPLATE
    try:
        yield
    finally:
        pio.templates.default = default


def _figure(figure: go.Figure, title: str) -> str:
    figure.update_layout(title=title, height=380, margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return figure.to_html(full_html=False, include_plotlyjs=False,
                          config={"displaylogo": False, "responsive": True})


def _cdf_trace(x: np.ndarray, y: np.ndarray, name: str) -> go.Scatter:
    return go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv"}, name=name)


def _response_cdf(analyses: list[Analysis]) -> str:
    figure = go.Figure()
    responses = LogHistogram.total_of(a.charts.response_ms for a in analyses)
    stalls = LogHistogram.total_of(a.charts.stall_ms for a in analyses)
    for histogram, name in ((responses, "response time (end of message to the answer)"),
                            (stalls, "Nagle/delayed-ACK stalls")):
        if histogram.total:
            figure.add_trace(_cdf_trace(*histogram.cdf(), name))
    figure.update_xaxes(title="milliseconds", type="log")
    figure.update_yaxes(title="fraction", range=[0, 1])
    return _figure(figure, "Response-time and stall CDF")


def _time_sequence(document: dict[str, Any], analyses: list[Analysis], notes: list[str]) -> list[str]:
    ids = document["connections"]
    worst = [(capture, sequence) for capture, analysis in enumerate(analyses)
             for sequence in analysis.charts.worst]
    worst.sort(key=lambda item: (-item[1].stall_lost_s, item[0], item[1].connection))
    return [_one_time_sequence(sequence, ids.shown(capture, sequence.connection), notes)
            for capture, sequence in worst[:WORST_CONNECTIONS]]


def _one_time_sequence(sequence: TimeSequence, shown: int, notes: list[str]) -> str:
    figure = go.Figure()
    for direction, name in ((0, "client to server"), (1, "server to client")):
        if direction not in sequence.data:
            continue
        data, acks = sequence.data[direction], sequence.acks[direction]
        _note_sampled(data, notes, f"connection {shown} {name} segments")
        figure.add_trace(go.Scatter(
            x=data.time_s, y=data.value, mode="markers", marker={"size": 4},
            name=f"{name}: data (sequence end)", text=[f"frame {f}" for f in data.frame.tolist()]))
        if acks.total:
            _note_sampled(acks, notes, f"connection {shown} {name} ACKs")
            figure.add_trace(go.Scatter(x=acks.time_s, y=acks.value, mode="lines",
                                        line={"shape": "hv", "width": 1}, name=f"{name}: ACKed"))
    released = sequence.released
    if released.total:
        figure.add_trace(go.Scatter(
            x=released.time_s, y=released.value, mode="markers",
            marker={"size": 10, "symbol": "x", "color": "red"}, name="released after a delayed ACK",
            text=[f"frame {f}: stall {ms:.1f} ms" for f, ms in
                  zip(released.frame.tolist(), sequence.released_stall_ms.tolist())]))
    figure.update_xaxes(title="seconds since the connection's first packet")
    figure.update_yaxes(title="relative sequence number")
    return _figure(figure, f"Time-sequence graph, connection {shown}")


def _note_sampled(trace: Trace, notes: list[str], what: str) -> None:
    if trace.total > len(trace.time_s):
        notes.append(f"{what}: {len(trace.time_s):,} of {trace.total:,} points drawn "
                     "(evenly sampled)")


def _busiest_hosts(analyses: list[Analysis], notes: list[str], what: str,
                   chosen: Callable[[HostCharts], list[HostProfile]],
                   total: Callable[[HostCharts], int]) -> list[tuple[int, HostProfile]]:
    """The hosts with the most delayed-ACK samples (a browser cannot draw thousands of charts)."""
    hosts = [(index, host) for index, analysis in enumerate(analyses)
             for host in chosen(analysis.charts.hosts)]
    hosts.sort(key=lambda item: (-item[1].delack_samples, item[0], item[1].address))
    count = sum(total(analysis.charts.hosts) for analysis in analyses)
    if count > MAX_HOST_CHARTS:
        notes.append(f"{what}: the {MAX_HOST_CHARTS} hosts with the most delayed ACKs of "
                     f"{count:,} (all hosts are in the JSON output)")
    return hosts[:MAX_HOST_CHARTS]


def _ack_delays(analyses: list[Analysis], notes: list[str]) -> list[str]:
    figures = []
    for index, host in _busiest_hosts(analyses, notes, "ACK-delay histograms",
                                      lambda charts: charts.delays,
                                      lambda charts: charts.hosts_with_delays):
        figure = go.Figure(go.Histogram(x=host.delays_ms, nbinsx=60, name="ACK delay"))
        if host.delack_timer_ms:
            figure.add_vline(x=host.delack_timer_ms, line_color="red",
                             annotation_text=f"timer {host.delack_timer_ms:.1f} ms")
        figure.update_xaxes(title="delay of the ACK of a lone segment (ms)")
        figure.update_yaxes(title="ACKs")
        figures.append(_figure(figure, f"ACK delays of {host.address} ({host.stack_family}), "
                                       f"capture {index}"))
    return figures


def _phase_plots(analyses: list[Analysis], notes: list[str]) -> list[str]:
    figures = []
    for index, host in _busiest_hosts(analyses, notes, "phase plots",
                                      lambda charts: charts.phase,
                                      lambda charts: charts.hosts_with_phase_tests):
        lock = host.phase_lock
        period_s = lock["period_ms"] / 1000
        degrees = np.mod(np.asarray(host.ack_times_s), period_s) / period_s * 360
        counts, edges = np.histogram(degrees, bins=36, range=(0, 360))
        figure = go.Figure(go.Barpolar(r=counts, theta=(edges[:-1] + 5), width=10,
                                       name="delayed ACKs"))
        verdict = "locked" if lock["locked"] else "not locked"
        figures.append(_figure(figure, f"Delayed-ACK phase of {host.address} modulo "
                                       f"{lock['period_ms']:.0f} ms ({verdict}, "
                                       f"p={lock['p_value']:.2g}), capture {index}"))
    return figures


def _packet_sizes(analyses: list[Analysis]) -> str:
    sizes = SizeCounts.total_of(a.charts.payload_bytes for a in analyses)
    figure = go.Figure()
    if sizes.total:
        figure.add_trace(_cdf_trace(*sizes.cdf(), "data packets"))
    figure.update_xaxes(title="payload bytes", type="log")
    figure.update_yaxes(title="fraction", range=[0, 1])
    return _figure(figure, "Packet-size CDF")


def _parity(document: dict[str, Any]) -> str:
    totals: dict[str, list[int]] = {}
    for row in document.get("segment_parity", []):
        label = f"{row['segments']} / {row['last_segment']}"
        total = totals.setdefault(label, [0, 0])
        total[0] += row["messages"]
        total[1] += row["stalled"]
    labels = sorted(totals)
    figure = go.Figure([go.Bar(x=labels, y=[totals[k][0] - totals[k][1] for k in labels],
                               name="no stall"),
                        go.Bar(x=labels, y=[totals[k][1] for k in labels], name="stalled")])
    figure.update_layout(barmode="stack")
    figure.update_xaxes(title="segments per message (odd/even) / last segment")
    figure.update_yaxes(title="messages")
    return _figure(figure, "Segment parity")


def _findings(document: dict[str, Any], found: Diagnosis, notes: list[str]) -> str:
    """The diagnosis as the text report orders it: the capped list, then each capture's idle
    and stop-and-wait in one line."""
    parts = [_finding(rank, finding, document) for rank, finding in found.shown]
    left_out = sum(found.left_out.values())
    if left_out:
        notes.append(f"findings: {len(found.shown)} of {len(found.shown) + left_out:,} are "
                     "listed, the Nagle family first, then the other causes, each by time lost, "
                     "then the patterns (all are in the JSON output)")
    folded = found.folded[:CAPTURES_SHOWN]
    if len(folded) < len(found.folded):
        notes.append(f"idle and stop-and-wait: {len(folded):,} of {len(found.folded):,} "
                     "captures (all are in the JSON output)")
    for line in folded:
        ranks = "-".join(str(rank) for rank in dict.fromkeys((line.ranks[0], line.ranks[-1])))
        parts.append(f"<div class='finding note'><b>{ranks}.</b> "
                     f"{_e(folded_line(line, in_capture(document, {'capture': line.capture})))}."
                     "</div>")
    return "".join(parts) or "<p>No findings.</p>"


def _finding(rank: int, finding: dict[str, Any], document: dict[str, Any]) -> str:
    title = KIND_TITLES.get(finding["kind"], finding["kind"])
    evidence = ", ".join(f"{e['last_data_frame']} &rarr; {e['delayed_ack_frame']} &rarr; "
                         f"{e['released_frame']}" for e in finding["events"][:3])
    fixes = "".join(f"<li><b>{_e(document['advice'][k]['title'])}</b> "
                    f"({_e(document['advice'][k]['side'])} side)</li>"
                    for k in finding["advice"] if k in document["advice"])
    word = "idle" if finding["kind"] == kinds.IDLE else "lost"
    bound = "up to " if is_upper_bound(finding) else ""
    return (f"<div class='finding'><b>{rank}. {_e(title)}</b> on connection "
            f"{finding['connection']}{_e(in_capture(document, finding))}"
            f" &mdash; {bound}{finding['time_lost_s']:.3f} s {word}, confidence "
            f"{_e(finding['confidence']['level'])}<br>{_e(finding['summary'])}."
            + (f"<br><span class='note'>Evidence frames (last data &rarr; ACK &rarr; next): "
               f"{evidence}</span>" if evidence else "")
            + (f"<ul>{fixes}</ul>" if fixes else "") + "</div>")


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
    """The document's headline (on green where nothing waited), and where there are
    Nagle-family stalls, the worst finding's fix."""
    headline = document["headline"]
    text = _e(headline["text"])
    if not stalls:
        plain = "" if headline["largest_other_delays"] else " ok"
        return f"<div class='verdict{plain}'>{text}</div>"
    worst = max(stalls, key=lambda f: f["time_lost_s"])
    fix = (f"; fix: {_e(document['advice'][worst['advice'][0]]['title'])}"
           if worst["advice"] else "")
    return (f"<div class='verdict'>{text} The worst: {_e(KIND_TITLES[worst['kind']])} on "
            f"connection {worst['connection']}{_e(in_capture(document, worst))}, "
            f"{_e(worst['sender'])} to {_e(worst['receiver'])}{fix}.</div>")


def render_html(document: dict[str, Any], analyses: list[Analysis]) -> str:
    """The whole report as one HTML page, from analyses made with their charts."""
    if any(analysis.charts is None for analysis in analyses):
        raise ValueError("the HTML report draws charts the analysis gathers: analyse with "
                         "charts=True")
    notes: list[str] = []
    found = diagnosis(document["findings"], MAX_FINDINGS_SHOWN)
    findings = _findings(document, found, notes)
    with _white_charts():
        charts = [_response_cdf(analyses), *_time_sequence(document, analyses, notes),
                  *_ack_delays(analyses, notes), *_phase_plots(analyses, notes),
                  _packet_sizes(analyses), _parity(document)]
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
        "<h2>Findings: the Nagle family first, then other causes, each by time lost</h2>"
        f"{findings}"
        f"<h2>Charts</h2>{''.join(charts)}"
        + (f"<p class='note'>Shown in part:</p><ul class='note'>{sampled}</ul>" if sampled else "")
        + f"<h2>Connections</h2><p class='note'>Click a column to sort.</p>{table}"
        f"{not_analysed}<h2>Capture accounting</h2>{accounting}"
        f"<p class='note'>nagledetect {_e(document['tool']['version'])}, schema "
        f"{_e(document['schema'])}</p><script>{SORT_SCRIPT}</script></body></html>")

