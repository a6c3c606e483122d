"""`nagledetect live`: capture an interface with libpcap into a pcap file, show what the
analysis finds in it so far, and hand the file to the same report `analyze` prints.

The capture runs in a thread of its own (the compiled core lets the Python lock go while it
waits for packets). Each packet goes through the core's one pass as it is captured; the view
takes the connections it has finished since the last look, runs the detectors on them and
keeps their totals (`StallTally`), and looks at the live connections as if they ended now.
The view is refreshed no sooner than twice the last look took after it, so that looking never
takes more than about a third of the time.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from nagledetect import _core
from nagledetect.analysis import Analysis
from nagledetect.detectors.kinds import NAGLE_FAMILY
from nagledetect.detectors.model import Finding
from nagledetect.flows.compiled import flow_tables_of
from nagledetect.flows.tables import FlowTables
from nagledetect.part_sizes import BYTES_PER_LIVE_PACKET, PARTS_MEMORY_BYTES
from nagledetect.pipeline import connection_level, mend_findings
from nagledetect.read.inputs import CaptureList
from nagledetect.stored import StoredRows
from nagledetect.table import Table

DEFAULT_SNAPLEN = 262_144
"""tcpdump's default: whole packets. The analysis reads only headers: 128 bytes is enough."""
CAPTURE_CALL_MS = 200
"""How long one call into the core captures before the thread looks at its limits again."""
LAST_BLOCK_MS = 250
"""How long the capture reads on once it is done: the kernel hands packets over a block at a
time, the last one up to the core's read timeout (100 ms) after its first packet came."""
VIEW_INTERVAL_S = 1.0
ANALYSIS_SHARE_WAIT = 2.0
"""After an analysis that took T, the next starts no sooner than this many T later."""
WORST_CONNECTIONS = 5
DROPS_TEXT = ("the capture dropped packets while this connection was open: stalls may be "
              "missing or misjudged")
PEEKED_LIVE_LOAD = 1_000_000
"""The view looks at the live connections as if they ended now only while they hold no more
packets than this (each connection counted as 10 too): a look copies and finishes them all,
about 0.1 s a million packets, while the capture competes for the same cores."""
STOPPED_LOOKING_TEXT = ("the view stopped: the live connections hold more packets than half of "
                        "--memory; the report at the end covers every packet")
NO_LIMIT_TEXT = ("needs --duration or --packets when not run on a terminal (nothing could "
                 "end it but a signal)")


class LiveError(Exception):
    """The capture cannot start or go on; the message says why in one line."""


@dataclass(frozen=True)
class LiveOptions:
    interface: str
    bpf_filter: str | None
    duration_s: float | None
    packets: int | None
    snaplen: int
    write_path: str | None
    memory_bytes: int = PARTS_MEMORY_BYTES
    """What the analysis of the file written may take (`--memory`); the view's pass stops when
    its live connections would take more than half of it."""


@dataclass
class DropWindow:
    """Packets libpcap counted as dropped between two looks at its statistics (wall clock)."""

    start_s: float
    end_s: float
    dropped: int


@dataclass
class Captured:
    """A finished live capture: the file, libpcap's final counts and when drops happened."""

    path: str
    interface: str
    counts: dict[str, int]
    drops: list[DropWindow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def stats_line(self) -> str:
        """libpcap's statistics, as tcpdump states them at its end."""
        counts = self.counts
        return (f"nagledetect: live: {counts['packets']:,} packets captured on "
                f"{self.interface}, {counts['dropped']:,} dropped by the kernel, "
                f"{counts['interface_dropped']:,} dropped by the interface "
                f"({counts['received']:,} received by the filter)")


class LiveCaptureList(CaptureList):
    """The written file as the reports name it: the file given to --write, else the
    interface (the temporary file is gone once the report is out)."""

    def __init__(self, path: str, interface: str, temporary: bool) -> None:
        super().__init__(paths=[path])
        self.shown = f"{interface} (live)" if temporary else path

    def shown_name(self, path: str) -> str:
        return self.shown if path == self.paths[0] else path

    def shown_text(self, text: str) -> str:
        return text.replace(self.paths[0], self.shown)


def check_limits(options: LiveOptions) -> None:
    """Without --duration or --packets only Ctrl-C ends a capture: refuse off a terminal."""
    if options.duration_s is None and options.packets is None and not _on_terminal():
        raise LiveError(NO_LIMIT_TEXT)


def _on_terminal() -> bool:
    return sys.stdin.isatty() or sys.stdout.isatty()


def written_path(options: LiveOptions) -> str:
    """--write's file, else one in the run's temporary folder (removed at the run's end)."""
    if options.write_path:
        return options.write_path
    return os.path.join(tempfile.gettempdir(), f"live-{os.getpid()}.pcap")


def capture_live(options: LiveOptions) -> Captured:
    """Capture until --duration, --packets or Ctrl-C, showing the view on a terminal."""
    check_limits(options)
    path = written_path(options)
    looked_at = sys.stdout.isatty() or sys.stderr.isatty()  # as the view is shown
    live_packets = options.memory_bytes // 2 // BYTES_PER_LIVE_PACKET if looked_at else None
    stop = threading.Event()
    # Ctrl-C is taken from before the capture opens (and writes its file): pressed that early,
    # it ends a capture of nothing, whose report follows.
    with _stop_on_interrupt(stop):
        try:
            capture = _core.LiveCapture(options.interface, options.snaplen, options.bpf_filter,
                                        path, live_packets)
        except (_core.LiveCaptureError, _core.FilterError) as error:
            raise LiveError(str(error)) from None
        worker = _CaptureThread(capture, options, stop)
        view = LiveView(options.interface, capture)
        worker.start()
        while not worker.finished.wait(view.next_wait_s()):
            view.refresh(worker.counts)
        worker.join()
    view.close()
    counts = capture.close()
    if worker.error:
        raise LiveError(f"{worker.error} ({counts['packets']:,} packets captured before)")
    return Captured(path, options.interface, counts, worker.drops, capture.warnings)


class _CaptureThread(threading.Thread):
    """Calls the core's capture until a limit is reached or `stop` is set; keeps the counts
    and the windows in which libpcap's drop counters grew."""

    def __init__(self, capture: _core.LiveCapture, options: LiveOptions,
                 stop: threading.Event) -> None:
        super().__init__(name="live-capture", daemon=True)
        self.capture = capture
        self.options = options
        self.stop = stop
        self.finished = threading.Event()
        self.counts: dict[str, int] = {"packets": 0, "dropped": 0, "interface_dropped": 0}
        self.drops: list[DropWindow] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            self._capture_until_done()
            self._take_last_block()
        except Exception as error:  # noqa: BLE001 - the main thread says it in one line
            self.error = str(error)
        finally:
            self.finished.set()

    def _capture_until_done(self) -> None:
        end_s = (time.monotonic() + self.options.duration_s
                 if self.options.duration_s is not None else None)
        while not self.stop.is_set():
            left_ms = CAPTURE_CALL_MS
            if end_s is not None:
                left_ms = min(left_ms, int((end_s - time.monotonic()) * 1000))
                if left_ms <= 0:
                    return
            wanted = self.options.packets
            if wanted is not None and self.counts["packets"] >= wanted:
                return
            self._take(left_ms)

    def _take_last_block(self) -> None:
        """The packets the kernel still holds once the capture is done (by its time, or
        Ctrl-C), and any that come meanwhile: the capture ends that much later."""
        wanted = self.options.packets
        if wanted is None or self.counts["packets"] < wanted:
            self._take(LAST_BLOCK_MS)

    def _take(self, max_ms: int) -> None:
        wanted = self.options.packets
        started_s = time.time()
        counts = self.capture.capture(
            max_ms, None if wanted is None else wanted - self.counts["packets"])
        self._note_drops(started_s, counts)
        self.counts = counts

    def _note_drops(self, started_s: float, counts: dict[str, int]) -> None:
        grown = _dropped(counts) - _dropped(self.counts)
        if grown > 0:
            self.drops.append(DropWindow(started_s, time.time(), grown))


def _dropped(counts: dict[str, int]) -> int:
    return counts["dropped"] + counts["interface_dropped"]


@contextmanager
def _stop_on_interrupt(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C (SIGINT) sets `stop`, which ends the capture cleanly: the report of what was
    captured follows."""
    previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class LiveView:
    """On a terminal (stdout), a few lines redrawn about once a second: elapsed time, packets
    and drops, connections and the Nagle-family stalls found so far, and the worst
    connections. Off a terminal, a progress line on stderr when stderr is one (as
    `analyze`'s), else nothing."""

    def __init__(self, interface: str, capture: _core.LiveCapture, screen: TextIO | None = None,
                 line: TextIO | None = None) -> None:
        self.interface = interface
        self.capture = capture
        self.screen = screen or sys.stdout
        self.line = line or sys.stderr
        self.on_screen = self.screen.isatty()
        self.on_line = not self.on_screen and self.line.isatty()
        self.start_s = time.monotonic()
        self.next_s = self.start_s + VIEW_INTERVAL_S
        self.drawn_lines = 0
        self.finished = StallTally()
        self.found: list[str] = ["waiting for packets"]

    def next_wait_s(self) -> float:
        return max(0.05, self.next_s - time.monotonic())

    def refresh(self, counts: dict[str, int]) -> None:
        """Draw the view when it is due, looking at what the pass has found when that is due
        too."""
        now = time.monotonic()
        if now < self.next_s:
            return
        if not (self.on_screen or self.on_line):
            self.next_s = now + VIEW_INTERVAL_S
            return
        looked_s = self._look() if counts["packets"] else 0.0
        self.next_s = time.monotonic() + max(VIEW_INTERVAL_S, ANALYSIS_SHARE_WAIT * looked_s)
        self._draw(self._header(counts), self.found)

    def _header(self, counts: dict[str, int]) -> str:
        elapsed_s = time.monotonic() - self.start_s
        return (f"live on {self.interface}: {elapsed_s:,.0f} s, {counts['packets']:,} packets, "
                f"dropped: {counts['dropped']:,} kernel, {counts['interface_dropped']:,} "
                "interface")

    def _look(self) -> float:
        """The lines of what the pass shows so far: the connections it finished since the last
        look added to the tally, the live ones looked at as if they ended now; returns how
        long it took."""
        started_s = time.monotonic()
        if not self.capture.looking:
            self.found = [STOPPED_LOOKING_TEXT]
            return 0.0
        try:
            finished = self.capture.finished()
            if finished is not None:
                self.finished.add(flow_tables_of(finished, filtered=False))
            shown = self.finished.copy()
            load = self.capture.live_load
            live = self.capture.peek() if load <= PEEKED_LIVE_LOAD else None
            if live is not None:
                shown.add(flow_tables_of(live, filtered=False))
        except Exception as error:  # noqa: BLE001 - the view must never stop the capture
            self.found = [f"the view's analysis failed ({type(error).__name__}: {error}); "
                          "the capture goes on"]
        else:
            self.found = shown.lines()
            if load > PEEKED_LIVE_LOAD:
                self.found[0] += (f" (finished connections only: the live ones hold {load:,} "
                                  "packets, too many to look at each time)")
        return time.monotonic() - started_s

    def _draw(self, header: str, found: list[str]) -> None:
        if self.on_line:
            self.line.write(f"\r{header}; {found[0]}"[:120].ljust(120))
            self.line.flush()
            return
        width = os.get_terminal_size(self.screen.fileno()).columns
        text = "".join(f"\x1b[2K{line[:width - 1]}\n" for line in [header, *found])
        self.screen.write(f"\x1b[{self.drawn_lines}F" * bool(self.drawn_lines) + text
                          + "\x1b[J")
        self.screen.flush()
        self.drawn_lines = 1 + len(found)

    def close(self) -> None:
        """Clear the view before the report."""
        if self.on_line:
            self.line.write("\r" + " " * 120 + "\r")
            self.line.flush()
        elif self.on_screen and self.drawn_lines:
            self.screen.write(f"\x1b[{self.drawn_lines}F\x1b[J")
            self.screen.flush()


@dataclass(frozen=True)
class ConnectionStalls:
    """One connection's Nagle-family stalls as the view names them."""

    sender: str
    receiver: str
    stalls: int
    kinds: tuple[str, ...]
    lost_s: float


@dataclass
class StallTally:
    """The Nagle-family stalls found so far: totals, the time of the last, and the connections
    that lost the most to them (only those few are kept, so a capture that runs for hours
    keeps no more)."""

    connections: int = 0
    stalls: int = 0
    lost_s: float = 0.0
    last_s: float | None = None
    worst: list[ConnectionStalls] = field(default_factory=list)

    def add(self, flows: FlowTables) -> None:
        """Add the connections of a batch of the core's pass (their flow tables)."""
        level = connection_level(flows, keep_packets=False, keep_segments=False)
        self.add_findings(len(level.connections), level.findings)

    def add_findings(self, connections: int, findings: Sequence[Finding]) -> None:
        """Add `connections` connections with these findings."""
        stalls = [finding for finding in findings if finding.kind in NAGLE_FAMILY]
        self.connections += connections
        self.stalls += sum(finding.count for finding in stalls)
        self.lost_s += sum(finding.time_lost_s for finding in stalls)
        starts_s = [float(row["start_s"]) for finding in stalls
                    for row in finding.events.rows[-1:] if "start_s" in row.dtype.names]
        if starts_s:
            self.last_s = max([*starts_s, *([] if self.last_s is None else [self.last_s])])
        self.worst = sorted([*self.worst, *_by_connection(stalls)],
                            key=lambda found: -found.lost_s)[:WORST_CONNECTIONS]

    def copy(self) -> StallTally:
        return StallTally(self.connections, self.stalls, self.lost_s, self.last_s,
                          list(self.worst))

    def lines(self) -> list[str]:
        """The view's lines: connections, the stalls with the time of the last, and the
        connections that lost the most to them."""
        count, connections = self.stalls, self.connections
        lines = [f"{connections:,} connection{'' if connections == 1 else 's'}; {count:,} "
                 f"Nagle-family stall{'' if count == 1 else 's'}, "
                 f"{self.lost_s * 1000:,.1f} ms lost{_last_stall_text(self.last_s)}"]
        return lines + [f"  {found.sender} -> {found.receiver}: {found.stalls:,} stalls "
                        f"({', '.join(found.kinds)}), {found.lost_s * 1000:,.1f} ms lost"
                        for found in self.worst]


def view_lines(analysis: Analysis) -> list[str]:
    """The view's lines for an analysis (`StallTally.lines`)."""
    tally = StallTally()
    tally.add_findings(len(analysis.capture.connections), analysis.findings)
    return tally.lines()


def _by_connection(stalls: Sequence[Finding]) -> list[ConnectionStalls]:
    """Each connection's stalls, its findings' kinds summed, named by its first finding's
    sender and receiver."""
    by_connection: dict[int, list[Finding]] = {}
    for finding in stalls:
        by_connection.setdefault(finding.connection, []).append(finding)
    return [ConnectionStalls(found[0].sender, found[0].receiver,
                             sum(finding.count for finding in found),
                             tuple(dict.fromkeys(finding.kind for finding in found)),
                             sum(finding.time_lost_s for finding in found))
            for found in by_connection.values()]


def _last_stall_text(last_s: float | None) -> str:
    if last_s is None:
        return ""
    return (f"; last at {time.strftime('%H:%M:%S', time.localtime(last_s))}"
            f".{int(last_s % 1 * 1000):03d}")


def add_capture_warnings(analysis: Analysis, captured: Captured) -> None:
    """Say in the report's accounting what libpcap warned of and how many packets it dropped,
    and on each finding whose connection was open while drops happened that its evidence may
    be incomplete (on the findings of a large capture, read from disk, as they are read)."""
    kernel, interface = captured.counts["dropped"], captured.counts["interface_dropped"]
    warnings = analysis.capture.accounting.warnings
    warnings += captured.warnings
    if kernel:
        warnings.append(f"{kernel:,} packets dropped by the kernel during the capture")
    if interface:
        warnings.append(f"{interface:,} packets dropped by the interface during the capture")
    touched = _connections_open_during(analysis.capture.connections, captured.drops)
    if not touched:
        return
    mend_findings(analysis, DropNote(frozenset(touched)))


@dataclass(frozen=True)
class DropNote:
    """Says on each finding of a connection open while packets were dropped that its evidence
    may be incomplete (a class, so that findings read from disk can be mended as they are
    read, and handed over)."""

    touched: frozenset[int]

    def __call__(self, positions: np.ndarray, findings: list[Finding]) -> None:
        for finding in findings:
            if finding.connection in self.touched:
                finding.details.setdefault("warnings", []).append(DROPS_TEXT)


def _connections_open_during(connections: object, drops: list[DropWindow]) -> set[int]:
    """The connections whose first and last packets span a window in which drops happened."""
    if not drops or not isinstance(connections, Table | StoredRows) or connections.empty:
        return set()
    open_ids: set[int] = set()
    for window in drops:
        during = ((connections["start_us"] <= window.end_s * 1e6)
                  & (connections["end_us"] >= window.start_s * 1e6))
        open_ids.update(connections["id"][during].tolist())
    return open_ids

