"""The HTML report's charts, drawn from what the analysis gathered (`chart_data`) and the
document; they decide nothing.

Each chart is a plotly figure handed to the page as JSON (`Chart`), so a test can read every
trace back. A chart with nothing to draw is not drawn: the page says why instead
(`ChartSet.not_drawn`), and what was sampled or capped (`ChartSet.notes`).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from nagledetect.analysis import Analysis
from nagledetect.chart_data import (
    LOG_EDGES_MS,
    MAX_HOST_CHARTS,
    MAX_POINTS,
    WORST_CONNECTIONS,
    HostCharts,
    LogHistogram,
    SizeCounts,
    TimeSequence,
    Trace,
)
from nagledetect.chunked import take
from nagledetect.detectors.model import HostProfile
from nagledetect.report.document import connection_position
from nagledetect.report.headline import plural

CHART_TEMPLATE = "plotly_white"
CHART_HEIGHT_PX = 420
STALL_RED = "#d62728"
DATA_BLUE = "#1f77b4"
ACK_GREEN = "#2ca02c"
DELAYED_ACK_TIMERS_MS = ((40.0, "40 ms: Linux delayed-ACK minimum"),
                         (200.0, "200 ms: Windows, BSD delayed ACK"))
"""The delayed-ACK timers an exchange stalled by Nagle waits for, marked on the latency chart."""
COARSE_BINS = 5
"""LOG_EDGES_MS bins merged into one bar of the latency chart: 20 bars a decade, each 12 %
wide, fine enough to show a 40 ms mode, coarse enough that a few hundred values make bars."""


@dataclass
class Chart:
    title: str
    figure: go.Figure

    def json(self) -> str:
        """The figure as JSON that is safe inside a <script> element."""
        return self.figure.to_json().replace("</", "<\\/")


@dataclass
class ChartSet:
    charts: list[Chart] = field(default_factory=list)
    not_drawn: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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


def _where(document: dict[str, Any], capture: int) -> str:
    """The capture a chart is of, on a line of its own under the title (a path is long), where
    the run has several; escaped, as plotly reads a title's tags."""
    captures = document["captures"]
    if len(captures) == 1:
        return ""
    return f"<br><sup>in {html.escape(captures[capture]['path'])}</sup>"


def _chart(figure: go.Figure, title: str, height_px: int = CHART_HEIGHT_PX) -> Chart:
    """Legend under the plot, so the plot keeps the page's width and no label is cut off."""
    figure.update_layout(title={"text": title, "x": 0.01}, height=height_px,
                         margin={"l": 70, "r": 30, "t": 75, "b": 60},
                         legend={"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0})
    return Chart(title, figure)


def charts(document: dict[str, Any], analyses: list[Analysis]) -> ChartSet:
    found = ChartSet()
    with _white_charts():
        for sequence, capture in _worst(analyses):
            found.charts.append(_time_sequence(document, capture, sequence, found.notes))
        if not found.charts:
            found.not_drawn.append("time-sequence graph: no connection has a Nagle stall")
        _latency(analyses, found)
        _ack_delays(document, analyses, found)
        _phase_plots(document, analyses, found)
        _packet_sizes(analyses, found)
        _parity(document, found)
    return found


def _worst(analyses: list[Analysis]) -> list[tuple[TimeSequence, int]]:
    worst = [(sequence, capture) for capture, analysis in enumerate(analyses)
             for sequence in analysis.charts.worst]
    worst.sort(key=lambda item: (-item[0].stall_lost_s, item[1], item[0].connection))
    return worst[:WORST_CONNECTIONS]


def _time_sequence(document: dict[str, Any], capture: int, sequence: TimeSequence,
                   notes: list[str]) -> Chart:
    shown = document["connections"].shown(capture, sequence.connection)
    (entry,) = take(document["connections"],
                    [connection_position(document["connections"], capture, shown)])
    names = {0: f"{entry['client']} to {entry['server']}",
             1: f"{entry['server']} to {entry['client']}"}
    figure = go.Figure()
    top = 0
    for direction in sorted(sequence.data):
        data, acks = sequence.data[direction], sequence.acks[direction]
        _note_sampled(data, notes, f"connection {shown}, {names[direction]}: data segments")
        _note_sampled(acks, notes, f"connection {shown}, {names[direction]}: ACKs")
        top = max(top, int(data.value.max()) if len(data.value) else 0)
        symbol = "circle" if direction == 0 else "diamond"
        figure.add_trace(go.Scatter(
            x=data.time_s, y=data.value, mode="markers", name=f"data {names[direction]}",
            marker={"size": 6, "symbol": symbol, "color": DATA_BLUE if direction == 0
                    else "#9467bd"},
            text=[f"frame {frame}" for frame in data.frame.tolist()]))
        if acks.total:
            figure.add_trace(go.Scatter(
                x=acks.time_s, y=acks.value, mode="lines",
                line={"shape": "hv", "width": 1.5, "color": ACK_GREEN if direction == 0
                      else "#ff7f0e", "dash": "solid" if direction == 0 else "dash"},
                name=f"ACKed of {names[direction]}", opacity=0.7))
    _stall_bands(figure, sequence, max(top, 1), notes, shown)
    figure.update_xaxes(title="seconds since the connection's first packet")
    figure.update_yaxes(title="relative sequence number (end of segment)", rangemode="tozero")
    lost_ms = sequence.stall_lost_s * 1000
    return _chart(figure, f"Connection {shown}: "
                          f"{plural(sequence.released.total, 'Nagle stall')}, "
                          f"{lost_ms:,.0f} ms lost "
                          f"(red bands: data held until a delayed ACK){_where(document, capture)}")


def _stall_bands(figure: go.Figure, sequence: TimeSequence, top: int, notes: list[str],
                 shown: int) -> None:
    """Each stall as a red band from the hold to the release, across the plot, and the
    released segment as a red cross: one trace of polygons, however many stalls."""
    released = sequence.released
    if not released.total:
        return
    chosen = np.arange(released.total)
    if released.total > MAX_POINTS:
        chosen = np.linspace(0, released.total - 1, MAX_POINTS).astype(int)
        notes.append(f"connection {shown}: {MAX_POINTS:,} of {released.total:,} stalls drawn "
                     "(evenly sampled)")
    end_s = released.time_s[chosen]
    start_s = end_s - sequence.released_stall_ms[chosen] / 1000
    gap = np.full(len(chosen), None)
    band_x = np.column_stack([start_s, start_s, end_s, end_s, gap]).ravel()
    band_y = np.column_stack([np.zeros(len(chosen)), np.full(len(chosen), top),
                              np.full(len(chosen), top), np.zeros(len(chosen)), gap]).ravel()
    figure.add_trace(go.Scatter(
        x=band_x, y=band_y, fill="toself", mode="lines", line={"width": 0},
        fillcolor="rgba(214,39,40,0.18)", name="stall: data held", hoverinfo="skip"))
    figure.add_trace(go.Scatter(
        x=end_s, y=released.value[chosen], mode="markers", name="released by the delayed ACK",
        marker={"size": 9, "symbol": "x", "color": STALL_RED},
        text=[f"frame {frame}: stall {ms:.1f} ms" for frame, ms in
              zip(released.frame[chosen].tolist(), sequence.released_stall_ms[chosen].tolist())]))


def _note_sampled(trace: Trace, notes: list[str], what: str) -> None:
    if trace.total > len(trace.time_s):
        notes.append(f"{what}: {len(trace.time_s):,} of {trace.total:,} points drawn "
                     "(evenly sampled)")


def _coarse_shares(histogram: LogHistogram) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The histogram's values in bars of COARSE_BINS bins: each bar's lower and upper edge
    (ms) and its share of the values (%)."""
    bar = (histogram.keys + COARSE_BINS - 1) // COARSE_BINS
    bars, where = np.unique(bar, return_inverse=True)
    counts = np.bincount(where, weights=histogram.counts)
    last = len(LOG_EDGES_MS) - 1
    upper = LOG_EDGES_MS[np.minimum(bars * COARSE_BINS, last)]
    lower = LOG_EDGES_MS[np.clip(bars * COARSE_BINS - COARSE_BINS, 0, last)]
    lower = np.where(bars == 0, upper / 10 ** (COARSE_BINS / 100), lower)
    return lower, upper, 100 * counts / histogram.total


def _bars_trace(histogram: LogHistogram, name: str, colour: str, noun: str,
                filled: bool) -> go.Scatter:
    """Bars on a log axis as outlines, filled or not (plotly's bars take widths on the linear
    scale); an unfilled one lets the bars behind it show."""
    lower, upper, share = _coarse_shares(histogram)
    gap = np.full(len(share), None)
    zero = np.zeros(len(share))
    x = np.column_stack([lower, lower, upper, upper, gap]).ravel()
    y = np.column_stack([zero, share, share, zero, gap]).ravel()
    hover = [f"{low:.3g}-{high:.3g} ms: {value:.1f}% of {noun}"
             for low, high, value in zip(lower, upper, share)]
    return go.Scatter(x=x, y=y, fill="toself" if filled else "none", mode="lines", name=name,
                      line={"color": colour, "width": 1 if filled else 2.5}, opacity=0.8,
                      text=[text for text in hover for _ in range(5)], hoverinfo="text")


def _latency(analyses: list[Analysis], found: ChartSet) -> None:
    exchanges = LogHistogram.total_of(a.charts.exchange_ms for a in analyses)
    stalls = LogHistogram.total_of(a.charts.stall_ms for a in analyses)
    if not exchanges.total and not stalls.total:
        found.not_drawn.append("exchange latency: no client message was answered, and no "
                               "Nagle stall was found")
        return
    figure = go.Figure()
    ends: list[float] = []
    for histogram, name, colour, noun, filled in (
            (exchanges, f"exchanges ({exchanges.total:,}): client's first byte to the "
                        "answer's last", DATA_BLUE, "exchanges", True),
            (stalls, f"Nagle stalls ({stalls.total:,})", STALL_RED, "stalls", False)):
        if histogram.total:
            figure.add_trace(_bars_trace(histogram, name, colour, noun, filled))
            lower, upper, _ = _coarse_shares(histogram)
            ends += [float(lower[0]), float(upper[-1])]
    for timer_ms, label in DELAYED_ACK_TIMERS_MS:
        figure.add_vline(x=timer_ms, line_dash="dot", line_color="#555")
        # On a log axis an annotation's x is the exponent (add_vline would put it at 10^40).
        figure.add_annotation(x=np.log10(timer_ms), y=1, xref="x", yref="paper", text=label,
                              textangle=-90, showarrow=False, xanchor="right", yanchor="top",
                              font={"size": 11, "color": "#555"})
    low = min(min(ends), 10.0) / 2
    high = max(max(ends), 300.0) * 2
    figure.update_xaxes(title="milliseconds (log scale)", type="log",
                        range=[np.log10(low), np.log10(high)])
    figure.update_yaxes(title="% of each (per bar)", rangemode="tozero")
    found.charts.append(_chart(figure, "Exchange latency and Nagle stalls: a mode at 40 ms or "
                                       "200 ms is a delayed-ACK timer"))


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


def _ack_delays(document: dict[str, Any], analyses: list[Analysis], found: ChartSet) -> None:
    hosts = _busiest_hosts(analyses, found.notes, "ACK-delay histograms",
                           lambda charts: charts.delays, lambda charts: charts.hosts_with_delays)
    if not hosts:
        found.not_drawn.append("ACK-delay histograms: no host delayed an ACK of a lone segment")
    for capture, host in hosts:
        delays = np.asarray(host.delays_ms)
        top_ms = float(max(delays.max(), host.delack_timer_ms or 0.0)) * 1.08 + 1
        figure = go.Figure(go.Histogram(
            x=delays, xbins={"start": 0, "end": top_ms, "size": max(top_ms / 80, 0.5)},
            name=f"ACKs of lone segments ({len(delays):,})", marker_color=DATA_BLUE))
        if host.delack_timer_ms:
            figure.add_vline(x=host.delack_timer_ms, line_color=STALL_RED, line_width=2,
                             annotation_text=f"timer {host.delack_timer_ms:.1f} ms",
                             annotation_position="top left" if host.delack_timer_ms > top_ms / 2
                             else "top right")
        figure.update_xaxes(title="delay of the ACK of a lone segment (ms)", range=[0, top_ms])
        figure.update_yaxes(title="ACKs")
        found.charts.append(_chart(figure, f"ACK delays of {host.address}: "
                                           f"{host.stack_family}{_where(document, capture)}"))


def _phase_plots(document: dict[str, Any], analyses: list[Analysis], found: ChartSet) -> None:
    tested = sum(analysis.charts.hosts.hosts_with_phase_tests for analysis in analyses)
    hosts = _busiest_hosts(analyses, found.notes, "phase plots",
                           lambda charts: charts.phase, lambda charts: charts.hosts_locked)
    if tested and not hosts:
        found.not_drawn.append(f"phase plot: {tested:,} host{'s' if tested > 1 else ''} tested, "
                               "none with delayed ACKs locked to a clock tick")
    for capture, host in hosts:
        lock = host.phase_lock
        period_s = lock["period_ms"] / 1000
        degrees = np.mod(np.asarray(host.ack_times_s), period_s) / period_s * 360
        counts, edges = np.histogram(degrees, bins=36, range=(0, 360))
        figure = go.Figure(go.Barpolar(r=counts, theta=(edges[:-1] + 5), width=10,
                                       name="delayed ACKs", marker_color=STALL_RED))
        found.charts.append(_chart(figure, f"LOCKED: delayed ACKs of {host.address} on a "
                                           f"{lock['period_ms']:.0f} ms clock tick "
                                           f"(p={lock['p_value']:.2g}){_where(document, capture)}"))


def _packet_sizes(analyses: list[Analysis], found: ChartSet) -> None:
    sizes = SizeCounts.total_of(a.charts.payload_bytes for a in analyses)
    if not sizes.total:
        found.not_drawn.append("packet sizes: no data packet")
        return
    keys, fractions = sizes.cdf()
    figure = go.Figure(go.Scatter(x=np.r_[keys[0], keys], y=np.r_[0.0, fractions],
                                  mode="lines+markers", line={"shape": "hv"},
                                  name=f"data packets ({sizes.total:,})"))
    figure.update_xaxes(title="payload bytes (log scale)", type="log")
    figure.update_yaxes(title="fraction at or below", range=[-0.02, 1.04])
    found.charts.append(_chart(figure, "Packet sizes (CDF): many small packets are what Nagle "
                                       "holds"))


def _parity(document: dict[str, Any], found: ChartSet) -> None:
    """Messages of 2+ segments by segment count parity, where some stalled (as the text report
    shows them)."""
    totals: dict[str, list[int]] = {}
    for row in document.get("segment_parity", []):
        if row["stalled"] <= 0:
            continue
        label = f"{row['segments']} / {row['last_segment']}"
        total = totals.setdefault(label, [0, 0])
        total[0] += row["messages"]
        total[1] += row["stalled"]
    if not totals:
        found.not_drawn.append("segment parity: no message of two or more segments stalled")
        return
    labels = sorted(totals)
    figure = go.Figure([go.Bar(x=labels, y=[totals[k][0] - totals[k][1] for k in labels],
                               name="no stall", marker_color=DATA_BLUE),
                        go.Bar(x=labels, y=[totals[k][1] for k in labels], name="stalled",
                               marker_color=STALL_RED)])
    figure.update_layout(barmode="stack")
    figure.update_xaxes(title="segments per message (odd/even) / last segment", type="category")
    figure.update_yaxes(title="messages")
    found.charts.append(_chart(figure, "Segment parity of messages with stalls"))
