"""The HTML report for ops teams: one self-contained file (plotly.js embedded once, no network).

It renders the result document and draws charts from the analysis tables it is handed (it
selects and samples points to draw; it decides nothing). Every string that came from a capture
or the command line is escaped; charts carry numbers and endpoint names only.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from nagledetect.analysis import Analysis
from nagledetect.report.text import KIND_TITLES, capped_findings

MAX_POINTS = 20_000
WORST_CONNECTIONS = 3
MAX_TABLE_ROWS = 2_000
MAX_FINDINGS_SHOWN = 50
MAX_HOST_CHARTS = 6
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


def _figure(figure: go.Figure, title: str) -> str:
    figure.update_layout(title=title, height=380, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                         template="plotly_white")
    return figure.to_html(full_html=False, include_plotlyjs=False,
                          config={"displaylogo": False, "responsive": True})


def _sample(values: np.ndarray, notes: list[str], what: str) -> np.ndarray:
    if len(values) <= MAX_POINTS:
        return values
    notes.append(f"{what}: {MAX_POINTS:,} of {len(values):,} points drawn (evenly sampled)")
    return values[np.linspace(0, len(values) - 1, MAX_POINTS).astype(int)]


def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ordered = np.sort(values)
    return ordered, np.arange(1, len(ordered) + 1) / max(len(ordered), 1)


def _response_cdf(document: dict[str, Any], analyses: list[Analysis], notes: list[str]) -> str:
    figure = go.Figure()
    stalls = 1000 * np.concatenate([np.zeros(0)] + [
        f["events"].stall_s for f in document["findings"] if f["kind"] == "nagle-delack-stall"])
    waits = []
    for analysis in analyses:
        messages = analysis.messages
        if messages.empty:
            continue
        ordered = messages.sort_values(["connection", "first_frame"])
        same = ordered["connection"].to_numpy()[1:] == ordered["connection"].to_numpy()[:-1]
        turn = ordered["direction"].to_numpy()[1:] != ordered["direction"].to_numpy()[:-1]
        gap = (ordered["start_us"].to_numpy()[1:] - ordered["end_us"].to_numpy()[:-1]) / 1000
        waits.append(gap[same & turn])
    responses = np.concatenate(waits) if waits else np.zeros(0)
    for values, name in ((responses, "response time (end of message to the answer)"),
                         (stalls, "Nagle/delayed-ACK stalls")):
        if len(values):
            x, y = _cdf(_sample(values, notes, name))
            figure.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name))
    figure.update_xaxes(title="milliseconds", type="log")
    figure.update_yaxes(title="fraction", range=[0, 1])
    return _figure(figure, "Response-time and stall CDF")


def _time_sequence(document: dict[str, Any], analyses: list[Analysis], notes: list[str]) -> list[str]:
    worst: dict[tuple[int, int], float] = {}
    for finding in document["findings"]:
        if finding["kind"] == "nagle-delack-stall":
            key = (finding["capture"], finding["connection"])
            worst[key] = worst.get(key, 0.0) + finding["time_lost_s"]
    figures = []
    first_ids = np.cumsum([0] + [len(a.capture.connections) for a in analyses])
    for (capture, connection), _ in sorted(worst.items(), key=lambda kv: -kv[1])[:WORST_CONNECTIONS]:
        local = connection - first_ids[capture]
        figures.append(_one_time_sequence(document, analyses[capture], int(local), connection, notes))
    return figures


def _one_time_sequence(document: dict[str, Any], analysis: Analysis, local: int, shown: int,
                       notes: list[str]) -> str:
    packets = analysis.capture.packets
    mine = packets[packets["connection"] == local]
    start_us = float(mine["time_us"].min())
    figure = go.Figure()
    for direction, name in ((0, "client to server"), (1, "server to client")):
        data = mine[(mine["direction"] == direction) & (mine["payload_bytes"] > 0)]
        acks = mine[(mine["direction"] != direction) & (mine["rel_ack"] > 0)]
        if data.empty:
            continue
        index = _sample(np.arange(len(data)), notes, f"connection {shown} {name} segments")
        chosen = data.iloc[index]
        figure.add_trace(go.Scatter(
            x=(chosen["time_us"] - start_us) / 1e6, y=chosen["rel_seq"] + chosen["payload_bytes"],
            mode="markers", marker={"size": 4}, name=f"{name}: data (sequence end)",
            text=[f"frame {f}" for f in chosen["frame"]]))
        if not acks.empty:
            index = _sample(np.arange(len(acks)), notes, f"connection {shown} {name} ACKs")
            chosen = acks.iloc[index]
            figure.add_trace(go.Scatter(x=(chosen["time_us"] - start_us) / 1e6, y=chosen["rel_ack"],
                                        mode="lines", line={"shape": "hv", "width": 1},
                                        name=f"{name}: ACKed"))
    released = [e for f in document["findings"] if f["kind"] == "nagle-delack-stall"
                and f["connection"] == shown for e in f["events"]]
    frames = {e["released_frame"]: e for e in released}
    marked = mine[mine["frame"].isin(list(frames))]
    if not marked.empty:
        figure.add_trace(go.Scatter(
            x=(marked["time_us"] - start_us) / 1e6, y=marked["rel_seq"] + marked["payload_bytes"],
            mode="markers", marker={"size": 10, "symbol": "x", "color": "red"},
            name="released after a delayed ACK",
            text=[f"frame {f}: stall {frames[f]['stall_s'] * 1000:.1f} ms" for f in marked["frame"]]))
    figure.update_xaxes(title="seconds since the connection's first packet")
    figure.update_yaxes(title="relative sequence number")
    return _figure(figure, f"Time-sequence graph, connection {shown}")


def _busiest_hosts(analyses: list[Analysis], notes: list[str], what: str, wanted) -> list[tuple]:
    """The hosts with the most delayed-ACK samples (a browser cannot draw thousands of charts)."""
    hosts = [(index, host) for index, analysis in enumerate(analyses)
             for host in analysis.hosts.values() if wanted(host)]
    hosts.sort(key=lambda item: -item[1].delack_samples)
    if len(hosts) > MAX_HOST_CHARTS:
        notes.append(f"{what}: the {MAX_HOST_CHARTS} hosts with the most delayed ACKs of "
                     f"{len(hosts):,} (all hosts are in the JSON output)")
    return hosts[:MAX_HOST_CHARTS]


def _ack_delays(analyses: list[Analysis], notes: list[str]) -> list[str]:
    figures = []
    for index, host in _busiest_hosts(analyses, notes, "ACK-delay histograms",
                                      lambda h: h.delack_samples > 0):
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
    for index, host in _busiest_hosts(analyses, notes, "phase plots", lambda h: h.phase_lock):
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


def _packet_sizes(analyses: list[Analysis], notes: list[str]) -> str:
    sizes = np.concatenate([a.capture.packets.loc[a.capture.packets["payload_bytes"] > 0,
                                                  "payload_bytes"].to_numpy() for a in analyses])
    figure = go.Figure()
    if len(sizes):
        x, y = _cdf(_sample(sizes, notes, "packet sizes"))
        figure.add_trace(go.Scatter(x=x, y=y, mode="lines", name="data packets"))
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


def _findings(document: dict[str, Any], notes: list[str]) -> str:
    parts = []
    shown, *_ = capped_findings(document["findings"], MAX_FINDINGS_SHOWN)
    if len(document["findings"]) > len(shown):
        notes.append(f"findings: {len(shown)} of {len(document['findings']):,} are listed, the "
                     "Nagle-related ones that cost time first, then the costliest others (all "
                     "are in the JSON output)")
    for rank, finding in shown:
        title = KIND_TITLES.get(finding["kind"], finding["kind"])
        evidence = ", ".join(f"{e['last_data_frame']} &rarr; {e['delayed_ack_frame']} &rarr; "
                             f"{e['released_frame']}" for e in finding["events"][:3])
        fixes = "".join(f"<li><b>{_e(document['advice'][k]['title'])}</b> "
                        f"({_e(document['advice'][k]['side'])} side)</li>"
                        for k in finding["advice"] if k in document["advice"])
        parts.append(
            f"<div class='finding'><b>{rank}. {_e(title)}</b> on connection {finding['connection']}"
            f" &mdash; {finding['time_lost_s']:.3f} s lost, confidence "
            f"{_e(finding['confidence']['level'])}<br>{_e(finding['summary'])}."
            + (f"<br><span class='note'>Evidence frames (last data &rarr; ACK &rarr; next): "
               f"{evidence}</span>" if evidence else "")
            + (f"<ul>{fixes}</ul>" if fixes else "") + "</div>")
    return "".join(parts) or "<p>No findings.</p>"


def _flow_table(document: dict[str, Any], notes: list[str]) -> str:
    stalls: dict[int, tuple[int, float]] = {}
    for f in document["findings"]:
        if f["kind"] == "nagle-delack-stall":
            count, lost = stalls.get(f["connection"], (0, 0.0))
            stalls[f["connection"]] = (count + f["count"], lost + f["time_lost_s"])
    connections = sorted(document["connections"], key=lambda c: -stalls.get(c["id"], (0, 0.0))[1])
    if len(connections) > MAX_TABLE_ROWS:
        notes.append(f"flow table: the {MAX_TABLE_ROWS:,} connections with the most stall time of "
                     f"{len(connections):,} (all are in the JSON output)")
        connections = connections[:MAX_TABLE_ROWS]
    head = ("<tr><th>id</th><th>client</th><th>server</th><th>packets</th><th>bytes</th>"
            "<th>MSS</th><th>vantage</th><th>RTT ms</th><th>stalls</th><th>lost s</th></tr>")
    rows = []
    for c in connections:
        count, lost = stalls.get(c["id"], (0, 0.0))
        rtt = "" if c["rtt_ms"] is None else f"{c['rtt_ms']:.3f}"
        rows.append(f"<tr><td>{c['id']}</td><td>{_e(c['client'])}</td><td>{_e(c['server'])}</td>"
                    f"<td>{sum(c['packets'].values())}</td><td>{sum(c['bytes'].values())}</td>"
                    f"<td>{c['mss']}</td><td>{_e(c['vantage'])}</td><td>{rtt}</td>"
                    f"<td>{count}</td><td>{lost:.3f}</td></tr>")
    return f"<table class='sortable'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _accounting(document: dict[str, Any]) -> str:
    rows = []
    for capture in document["captures"]:
        skipped = "".join(f"<li>{_e(reason)}: {count}</li>" for reason, count in capture["skipped"].items())
        warnings = "".join(f"<li>warning: {_e(w)}</li>" for w in capture["warnings"])
        rows.append(f"<p><code>{_e(capture['path'])}</code> ({_e(capture['link_type_name'])}): "
                    f"{capture['packets']} packets read = {capture['tcp_packets']} TCP used + "
                    f"{sum(capture['skipped'].values())} skipped</p><ul>{skipped}{warnings}</ul>")
    return "".join(rows)


def _verdict(document: dict[str, Any]) -> str:
    stalls = [f for f in document["findings"] if f["kind"] == "nagle-delack-stall"]
    if not stalls:
        return "<div class='verdict ok'>No Nagle/delayed-ACK stalls: nothing to change here.</div>"
    lost = sum(f["time_lost_s"] for f in stalls)
    count = sum(f["count"] for f in stalls)
    worst = max(stalls, key=lambda f: f["time_lost_s"])
    return (f"<div class='verdict'>{count} stalls cost {lost:.2f} s on {len(stalls)} connection "
            f"direction(s). The worst: {_e(worst['sender'])} waits for {_e(worst['receiver'])}'s "
            f"delayed ACK; fix: {_e(document['advice'][worst['advice'][0]]['title'])}.</div>")


def render_html(document: dict[str, Any], analyses: list[Analysis]) -> str:
    """The whole report as one HTML page."""
    notes: list[str] = []
    charts = [_response_cdf(document, analyses, notes), *_time_sequence(document, analyses, notes),
              *_ack_delays(analyses, notes), *_phase_plots(analyses, notes),
              _packet_sizes(analyses, notes),
              _parity(document)]
    table = _flow_table(document, notes)
    findings = _findings(document, notes)
    sampled = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>nagledetect report</title><style>{STYLE}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<h1>nagledetect report</h1>{_verdict(document)}"
        f"<h2>Findings, ranked by time lost</h2>{findings}"
        f"<h2>Charts</h2>{''.join(charts)}"
        + (f"<p class='note'>Drawn from a sample:</p><ul class='note'>{sampled}</ul>" if sampled else "")
        + f"<h2>Connections</h2><p class='note'>Click a column to sort.</p>{table}"
        f"<h2>Capture accounting</h2>{_accounting(document)}"
        f"<p class='note'>nagledetect {_e(document['tool']['version'])}, schema "
        f"{_e(document['schema'])}</p><script>{SORT_SCRIPT}</script></body></html>")

