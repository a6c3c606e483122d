"""The terminal report: diagnosis first, ranked by time lost; then how to fix it, the per-host
delayed-ACK timers, phase locking, segment parity, the connection table and the accounting.

It renders the result document only; every number here is also in the JSON.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from nagledetect.chunked import take
from nagledetect.detectors import kinds
from nagledetect.report.document import (
    connection_position,
    finding_captures,
    is_folded,
    kinds_and_times,
    nagle_family,
)
from nagledetect.report.evidence_words import evidence_line
from nagledetect.report.headline import duration_text, frames_of, is_upper_bound, plural

KIND_TITLES = {
    kinds.NAGLE_DELACK_STALL: "Nagle / delayed-ACK stall",
    kinds.NAGLE_RTT_HOLD: "Nagle hold for one round trip",
    kinds.STREAM_COALESCING: "Small-message stream coalescing (Nagle)",
    kinds.LOSS_RECOVERY: "Loss recovery (not Nagle)",
    kinds.ZERO_WINDOW: "Zero window (not Nagle)",
    kinds.WINDOW_LIMITED: "Small receive window (not Nagle)",
    kinds.HANDSHAKE_RETRY: "Handshake retried (not Nagle)",
    kinds.THINK_TIME: "Application think time (not Nagle)",
    kinds.IDLE: "Idle: nobody waiting (not Nagle)",
    kinds.PHASE_LOCK: "Delayed ACKs phase-locked to a clock tick",
    kinds.SEGMENT_PARITY: "Odd/even segment counts decide the stalls",
    kinds.TINYGRAM_FLOOD: "Tinygram flood (poor buffering)",
    kinds.STOP_AND_WAIT: "Stop-and-wait exchanges",
}
EVIDENCE_SHOWN = 3
FILTER_SHOWN_CHARS = 100
"""A display filter longer than this is shown as the span of its frames."""
PARITY_ROWS_SHOWN = 20
FINDINGS_SHOWN = 10
"""Findings listed one by one unless --verbose: with their evidence and fix, a screen or two."""
HOSTS_SHOWN = 20
CONNECTIONS_SHOWN = 50
CAPTURES_SHOWN = 20
SKIP_REASONS_SHOWN = 10
NOT_ANALYSED_SHOWN = 20
WHERE_ALL_ARE = "--verbose lists them all; --format json has every one"
"""What every capped list says of the rows it left out."""
LANGUAGES = ("C", "Python", "Go", "Java", "Node.js", ".NET", "Rust")
"""The languages HOW TO FIX gives each fix's code in (`--fixes`: all; `--lang`: one)."""
CONNECTION_COLUMNS = (
    ("id", ">4"), ("client", "<24"), ("server", "<24"), ("pkts c>s", ">8"), ("pkts s>c", ">8"),
    ("bytes c>s", ">10"), ("bytes s>c", ">10"), ("MSS", ">6"), ("vantage", "<8"),
    ("RTT ms", ">8"), ("c-side/s-side", ">15"), ("stalls", ">6"), ("lost s", ">8"),
)


class _Style:
    """Bold and colour only when asked (a TTY without NO_COLOR)."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def heading(self, text: str) -> str:
        return click.style(text, bold=True) if self.colour else text

    def alert(self, text: str) -> str:
        return click.style(text, fg="red", bold=True) if self.colour else text

    def quiet(self, text: str) -> str:
        return click.style(text, dim=True) if self.colour else text


def _capped(rows: list, limit: int, verbose: bool, noun: str) -> tuple[list, list[str]]:
    """The first `limit` rows (all with --verbose) and a line saying how many were left out:
    a capture of a million connections must still give a report a person can read."""
    if verbose or len(rows) <= limit:
        return rows, []
    return rows[:limit], [_left_out_line(len(rows) - limit, noun)]


@dataclass
class FoldedCapture:
    """A capture's idle and stop-and-wait findings, which the diagnosis folds into one line:
    idle time is time nobody waited for, and stop-and-wait counts none of its own."""

    capture: int
    ranks: list[int] = field(default_factory=list)
    idle: int = 0
    """Idle findings: one per connection."""
    idle_s: float = 0.0
    longest_idle_s: float = 0.0
    stop_and_wait: int = 0
    """Stop-and-wait findings: one per connection."""


@dataclass
class Diagnosis:
    """What a diagnosis of at most `limit` findings shows: the findings listed one by one, in
    the document's order (the Nagle family first, then the other named causes, each by time
    lost, then the patterns) as (rank, finding), how many it leaves out of each sort, each
    capture's folded line, and every Nagle-family finding (for the connection tables)."""

    shown: list[tuple[int, dict[str, Any]]]
    left_out: Counter[str]
    folded: list[FoldedCapture]
    stalls: list[dict[str, Any]]


def diagnosis(findings: Sequence[dict[str, Any]], limit: int | None) -> Diagnosis:
    """The diagnosis of a document's findings (`limit` None: every one listed). They are picked
    by their kinds and times, and only those listed are made; the Nagle family's come from the
    document, which read them once for its headline (a large capture's findings are read from
    disk: the 10 M mix's text report took 8.1-8.8 s so, 9.5-9.8 s reading all 76,544)."""
    kind_of_each, times = kinds_and_times(findings)
    listed: list[int] = []
    folded: dict[int, FoldedCapture] = {}
    for position, (kind, lost, capture) in enumerate(zip(kind_of_each, times,
                                                         finding_captures(findings))):
        if not is_folded(kind):
            listed.append(position)
            continue
        line = folded.setdefault(capture, FoldedCapture(capture))
        line.ranks.append(position + 1)
        if kind == kinds.IDLE:
            line.idle += 1
            line.idle_s += lost
            line.longest_idle_s = max(line.longest_idle_s, lost)
        else:
            line.stop_and_wait += 1
    shown = listed if limit is None else listed[:limit]
    left_out = Counter(_sort_of(kind_of_each[position]) for position in listed[len(shown):])
    return Diagnosis(list(zip([position + 1 for position in shown], take(findings, shown))),
                     left_out, list(folded.values()), nagle_family(findings))


def _sort_of(kind: str) -> str:
    if kinds.is_nagle_family(kind):
        return "Nagle-family, each costing less time than those above"
    if kind in kinds.OTHER_GAP_CAUSES:
        return "of other causes, not Nagle"
    return "patterns that count no time of their own"


StallTotals = dict[tuple[int, int], tuple[int, float]]
"""Nagle-family stall count and time lost by (capture, connection id)."""


def stalls_by_connection(stalls: list[dict[str, Any]]) -> StallTotals:
    """Each connection's Nagle-family stall count and time lost, by (capture, connection id),
    for the connection tables."""
    totals: StallTotals = {}
    for finding in stalls:
        key = (finding["capture"], finding["connection"])
        count, lost = totals.get(key, (0, 0.0))
        totals[key] = (count + finding["count"], lost + finding["time_lost_s"])
    return totals


def _findings_left_out_line(left_out: Counter[str]) -> list[str]:
    if not left_out:
        return []
    sorts = "; ".join(f"{count} {sort}" for sort, count in left_out.items())
    return [f"  ... and {sum(left_out.values())} more findings ({sorts}; {WHERE_ALL_ARE})"]


def folded_line(line: FoldedCapture, where: str) -> str:
    """A capture's idle and stop-and-wait findings in one line (without the ranks)."""
    parts = []
    if line.idle:
        longest = (f", the longest {duration_text(line.longest_idle_s)}" if line.idle > 1
                   else "")
        parts.append(f"{plural(line.idle, 'connection')} idle {duration_text(line.idle_s)}"
                     f"{' in all' if line.idle > 1 else ''}{longest} (nobody was waiting: not "
                     "time lost)")
    if line.stop_and_wait:
        parts.append(f"{plural(line.stop_and_wait, 'connection')} exchanging stop-and-wait, one "
                     "message at a time")
    title = " and ".join(name for name, count in (("Idle", line.idle),
                                                  ("stop-and-wait", line.stop_and_wait)) if count)
    return f"{title[0].upper()}{title[1:]} (not Nagle){where}: {'; '.join(parts)}"


def _folded_lines(document: dict[str, Any], found: Diagnosis, verbose: bool,
                  style: _Style) -> list[str]:
    """Each capture's folded line; with `verbose`, its findings listed under it."""
    shown, left_out = _capped(found.folded, CAPTURES_SHOWN, verbose,
                              "captures with idle time or stop-and-wait")
    lines = []
    for line in shown:
        ranks = (f"{line.ranks[0]}" if len(line.ranks) == 1
                 else f"{line.ranks[0]}-{line.ranks[-1]}")
        where = in_capture(document, {"capture": line.capture})
        lines.append(style.quiet(f"{ranks:>2}. {folded_line(line, where)}."))
        if verbose:
            for rank, finding in zip(line.ranks, take(document["findings"],
                                                      [rank - 1 for rank in line.ranks])):
                lines += _finding_lines(rank, finding, document, verbose, style) + [""]
    return lines + left_out + ([""] if lines and not verbose else [])


def _left_out_line(count: int, noun: str) -> str:
    return f"  ... and {count} more {noun} ({WHERE_ALL_ARE})"


def _ms(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _evidence(finding: dict[str, Any], verbose: bool) -> list[str]:
    events = finding["events"] if verbose else finding["events"][:EVIDENCE_SHOWN]
    lines = [f"       {evidence_line(finding['kind'], event)}" for event in events]
    hidden = len(finding["events"]) - len(events)
    if hidden > 0:
        lines.append(f"       ... and {hidden} more (--verbose lists every event)")
    return lines


def _finding_lines(rank: int, finding: dict[str, Any], document: dict[str, Any], verbose: bool,
                   style: _Style) -> list[str]:
    title = KIND_TITLES.get(finding["kind"], finding["kind"])
    if finding.get("subkind"):
        title += f" ({finding['subkind']})"
    cost = cost_text(finding)
    lines = [style.alert(f"{rank:>2}. {title}") +
             f" on connection {finding['connection']}{in_capture(document, finding)}: {cost}, "
             f"confidence {finding['confidence']['level']}",
             f"     {finding['summary']}."]
    if finding["confidence"]["reasons"]:
        lines.append(f"     Why we think so: {'; '.join(finding['confidence']['reasons'])}.")
    lines += _evidence(finding, verbose)
    lines.append(_display_filter_line(finding))
    for key in finding["advice"][:1]:
        advice = document["advice"][key]
        who = {"sender": f"the sender {finding['sender']}",
               "receiver": f"the receiver {finding['receiver']}",
               "network": "the network path"}.get(advice["side"], "the application protocol")
        if advice["side"] == "network":  # nobody's socket call fixes a path: say where to look
            lines.append(f"     Where to look ({who}): {advice['title']} [{key}].")
            continue
        saving = (f"; would save up to {duration_text(finding['time_lost_s'])} here"
                  if finding["time_lost_s"] > 0 else "")
        lines.append(f"     Fix ({who} must change): {advice['title']} [{key}]{saving}.")
    others = ", ".join(finding["advice"][1:])
    if others:
        lines.append(f"     Other fixes: {others} (--fixes shows each with its code).")
    lines += [f"     Warning: {warning}" for warning in finding.get("details", {}).get("warnings", [])]
    return lines


def _display_filter_line(finding: dict[str, Any]) -> str:
    """The finding's Wireshark filter; one too long for a line as the span of its frames (the
    document and the HTML report carry the exact one)."""
    shown = finding["display_filter"]
    frames = frames_of(finding)
    if len(shown) <= FILTER_SHOWN_CHARS or frames is None:
        return f"     Wireshark: {shown}"
    return (f"     Wireshark: tcp.stream eq {finding['connection']} && frame.number in "
            f"{{{frames[0]}..{frames[1]}}} (the span; --format json lists the exact frames)")


def cost_text(finding: dict[str, Any]) -> str:
    """The time a finding counts: time lost, except idle time, which nobody waited for."""
    if finding["time_lost_s"] <= 0:
        return "no extra time counted"
    word = "idle" if finding["kind"] == kinds.IDLE else "lost"
    bound = "up to " if is_upper_bound(finding) else ""
    return (f"{bound}{duration_text(finding['time_lost_s'])} {word} ({finding['share'] * 100:.0f}% "
            "of the connection)")


def in_capture(document: dict[str, Any], entry: dict[str, Any]) -> str:
    """" in FILE" for an entry of a run over several captures (its frame numbers are that
    file's), else nothing."""
    captures = document["captures"]
    return f" in {captures[entry['capture']]['path']}" if len(captures) > 1 else ""


def _how_to_fix(document: dict[str, Any], style: _Style, languages: Sequence[str]) -> list[str]:
    """Every fix the findings name, with its code in `languages` (none: not shown at all; the
    findings already name their fix and the side that must change)."""
    if not document["advice"] or not languages:
        return []
    lines = [style.heading("HOW TO FIX")]
    for key, advice in document["advice"].items():
        lines.append(f"  [{key}] {advice['title']} ({advice['side']} side)")
        lines.append(f"    {advice['why']}")
        lines.append(f"    Trade-offs: {advice['tradeoffs']}")
        lines += [f"    {language:8} {advice['calls'][language]}" for language in languages
                  if language in advice["calls"]]
    return lines + [""]


def _hosts(document: dict[str, Any], style: _Style, verbose: bool) -> list[str]:
    lines = [style.heading("DELAYED-ACK TIMERS (per receiving host, fingerprinted from lone-segment ACKs)")]
    sampled, tested = _sampled_and_tested(document["hosts"])
    hosts = sorted(sampled, key=lambda h: -h["delack_samples"])
    if not hosts:
        return lines + ["  no delayed ACKs seen", ""]
    hosts, hosts_left_out = _capped(hosts, HOSTS_SHOWN, verbose, "hosts")
    lines.append(f"  {'host':<40} {'timer ms':>9} {'spread ms':>10} {'samples':>8}  stack")
    lines += [f"  {h['address']:<40} {_ms(h['delack_timer_ms'], 1):>9} "
              f"{_ms(h['delack_spread_ms'], 2):>10} {h['delack_samples']:>8}  {h['stack_family']}"
              for h in hosts]
    lines += hosts_left_out + [""]
    locked = [h for h in tested if h["phase_lock"].get("locked")]
    if not locked and not verbose:
        return lines
    lines.append(style.heading("PHASE LOCKING (delayed ACKs on a global clock tick)"))
    tested.sort(key=lambda h: (not h["phase_lock"].get("locked"), h["phase_lock"]["p_value"]))
    shown, tested_left_out = _capped(tested, HOSTS_SHOWN, verbose, "tested hosts")
    for host in shown:
        lock = host["phase_lock"]
        verdict = "LOCKED" if lock.get("locked") else "not locked"
        lines.append(f"  {host['address']:<40} {verdict}: tick {lock['period_ms']:.0f} ms, "
                     f"Rayleigh R={lock['rayleigh_r']:.3f}, p={lock['p_value']:.2g}, n={lock['n']}, "
                     f"phase {lock['phase_ms']:.1f} ms, connections {len(lock['connections'])}")
    lines += tested_left_out
    if not tested:
        lines.append("  not tested (too few delayed ACKs)")
    elif not locked:
        lines.append("  no host's delayed ACKs follow a global tick")
    return lines + [""]


def _sampled_and_tested(hosts: Iterable[dict[str, Any]]
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The hosts with delayed-ACK samples, and those tested for phase locking, in document
    order: the document's hosts are made as they are read, so they are read once."""
    sampled: list[dict[str, Any]] = []
    tested: list[dict[str, Any]] = []
    for host in hosts:
        if host["delack_samples"] > 0:
            sampled.append(host)
        if host["phase_lock"]:
            tested.append(host)
    return sampled, tested


def _parity(document: dict[str, Any], style: _Style, verbose: bool) -> list[str]:
    """The segment-parity rows; unless `verbose`, only those with stalls (a row none of whose
    messages stalled says nothing about Nagle), and nothing when there are none."""
    rows = document.get("segment_parity", [])
    if not verbose:
        rows = [row for row in rows if row["stalled"] > 0]
        if not rows:
            return []
    lines = [style.heading("SEGMENT PARITY (messages of 2+ segments: odd/even count, last segment)")]
    if not rows:
        return lines + ["  no multi-segment messages", ""]
    lines.append(f"  {'conn':>4} {'direction':<17} {'segments':<8} {'last':<8} {'messages':>8} "
                 f"{'stalled':>7} {'rate':>6}")
    shown = rows[:PARITY_ROWS_SHOWN]
    lines += [f"  {r['connection']:>4} {r['direction']:<17} {r['segments']:<8} {r['last_segment']:<8} "
              f"{r['messages']:>8} {r['stalled']:>7} {r['stall_rate'] * 100:>5.0f}%" for r in shown]
    if len(rows) > len(shown):
        lines.append(f"  ... {len(rows) - len(shown)} more rows in the JSON output")
    return lines + [""]


def _connection_row(connection: dict[str, Any], stalls: StallTotals) -> list[str]:
    mss = f"{connection['mss']}{'~' if connection['mss_source'] == 'estimated' else ''}"
    client = connection["client"] + ("?" if connection["client_guessed"] else "")
    sides = f"{_ms(connection['rtt_client_side_ms'])}/{_ms(connection['rtt_server_side_ms'])}"
    count, lost = stalls.get((connection["capture"], connection["id"]), (0, 0.0))
    return [str(connection["id"]), client, connection["server"],
            str(connection["packets"]["client_to_server"]),
            str(connection["packets"]["server_to_client"]),
            str(connection["bytes"]["client_to_server"]),
            str(connection["bytes"]["server_to_client"]), mss, connection["vantage"],
            _ms(connection["rtt_ms"]), sides, str(count), f"{lost:.3f}"]


def _worst_connections(connections: Any, stalls: StallTotals,
                       verbose: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """In id order: every connection, or (over the cap) those that lost the most stall time,
    then the lowest ids; entries are made only for the connections shown."""
    if verbose or len(connections) <= CONNECTIONS_SHOWN:
        return list(connections), []
    lost_at = {connection_position(connections, *key): lost for key, (_, lost) in stalls.items() if lost > 0}
    ranked = sorted(lost_at, key=lambda i: (-lost_at[i], i))[:CONNECTIONS_SHOWN]
    chosen = set(ranked)
    fill = (i for i in range(len(connections)) if i not in chosen)
    chosen.update(itertools.islice(fill, CONNECTIONS_SHOWN - len(ranked)))
    return (take(connections, sorted(chosen)),
            [_left_out_line(len(connections) - CONNECTIONS_SHOWN,
                            "connections, each with less stall time")])


def _connections(document: dict[str, Any], stalls: StallTotals, style: _Style,
                 verbose: bool) -> list[str]:
    """The connections table; `stalls`: each connection's stall count and time lost (the
    findings, read from disk for a large capture, are gone through once, for the diagnosis)."""
    header = " ".join(f"{name:{spec}}" for name, spec in CONNECTION_COLUMNS)
    lines = [style.heading(f"CONNECTIONS ({len(document['connections'])})"), header, "-" * len(header)]
    shown, left_out = _worst_connections(document["connections"], stalls, verbose)
    capture = None
    for connection in shown:
        if in_capture(document, connection) and connection["capture"] != capture:
            capture = connection["capture"]
            lines.append(f" {in_capture(document, connection).strip()}:")
        cells = _connection_row(connection, stalls)
        lines.append(" ".join(f"{cell:{spec}}" for cell, (_, spec) in zip(cells, CONNECTION_COLUMNS)))
    lines += left_out
    lines.append(style.quiet(f"  {_legend(shown)}."))
    return lines + [""]


def _legend(shown: list[dict[str, Any]]) -> str:
    """What the marks of the rows shown mean, only those some row carries."""
    notes = []
    if any(connection["mss_source"] == "estimated" for connection in shown):
        notes.append("MSS~ estimated (no handshake)")
    if any(connection["client_guessed"] for connection in shown):
        notes.append("client? guessed by the port rule")
    return "; ".join([*notes, "RTT sides: tap to client / tap to server"])


def _not_analysed(document: dict[str, Any], style: _Style, verbose: bool) -> list[str]:
    """The files of the run that were not analysed, as the document lists them: errors first,
    then files of the folders named that are not captures."""
    entries = document["not_analysed"]
    if not entries:
        return []
    shown = entries if verbose else entries[:NOT_ANALYSED_SHOWN]
    lines = [style.heading(f"NOT ANALYSED ({len(entries)} file{'s' if len(entries) > 1 else ''})")]
    lines += [f"  {'error' if entry['error'] else 'left out'}: {entry['path']}: {entry['reason']}"
              for entry in shown]
    if len(shown) < len(entries):
        lines.append(_left_out_line(len(entries) - len(shown), "files"))
    return lines + [""]


def _accounting(document: dict[str, Any], style: _Style, verbose: bool) -> list[str]:
    """Each capture's packets read, used and skipped, and its warnings; over several captures,
    their totals first, then (unless `verbose`) CAPTURES_SHOWN of them, in run order, those
    with warnings chosen first (an archive's thousands of lines would bury them)."""
    captures = document["captures"]
    lines = [style.heading("CAPTURE ACCOUNTING")]
    totals = AccountingTotals.of(captures, CAPTURES_SHOWN)
    if len(captures) > 1:
        lines += _accounting_totals(totals, len(captures), verbose)
    shown = list(captures) if verbose else totals.shown
    lines += _capture_accounting(shown)
    if len(shown) < len(captures):
        lines.append(_left_out_line(len(captures) - len(shown), "captures"))
    return lines


@dataclass
class AccountingTotals:
    """The packets of several captures read, used and skipped (by reason), how many of the
    captures have warnings, and the captures a report lists: the first `limit` with warnings,
    made up to that many with the first without, in run order. One pass over the document's
    captures, whose entries are made as they are read."""

    read: int = 0
    used: int = 0
    warned: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    shown: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, captures: Iterable[dict[str, Any]], limit: int) -> AccountingTotals:
        totals = cls()
        warned: list[tuple[int, dict[str, Any]]] = []
        quiet: list[tuple[int, dict[str, Any]]] = []
        for position, capture in enumerate(captures):
            totals.read += capture["packets"]
            totals.used += capture["tcp_packets"]
            totals.warned += bool(capture["warnings"])
            totals.skipped.update(capture["skipped"])
            kept = warned if capture["warnings"] else quiet
            if len(kept) < limit:
                kept.append((position, capture))
        chosen = sorted(warned + quiet[:limit - len(warned)], key=lambda item: item[0])
        totals.shown = [capture for _, capture in chosen]
        return totals


def _accounting_totals(totals: AccountingTotals, captures: int, verbose: bool) -> list[str]:
    reasons = totals.skipped.most_common(None if verbose else SKIP_REASONS_SHOWN)
    lines = [f"  all {captures} captures: {totals.read} packets read = {totals.used} TCP "
             f"used + {sum(totals.skipped.values())} skipped; {totals.warned} with warnings"]
    lines += [f"    skipped {count:>9}  {reason}" for reason, count in reasons]
    if len(reasons) < len(totals.skipped):
        lines.append(_left_out_line(len(totals.skipped) - len(reasons),
                                    "reasons, each skipping fewer"))
    return lines


def _capture_accounting(captures: list[dict[str, Any]]) -> list[str]:
    lines = []
    for capture in captures:
        skipped = sum(capture["skipped"].values())
        lines.append(f"  {capture['path']} ({capture['link_type_name']}, link type "
                     f"{capture['link_type']}): {capture['packets']} packets read = "
                     f"{capture['tcp_packets']} TCP used + {skipped} skipped")
        lines += [f"    skipped {count:>9}  {reason}" for reason, count in capture["skipped"].items()]
        lines += [f"    warning: {warning}" for warning in capture["warnings"]]
    return lines


def _closing_line(document: dict[str, Any], found: Diagnosis, languages: Sequence[str],
                  verbose: bool) -> str:
    """One line to end on: the stalls and the first fix to make (else the cause that cost the
    most), and where more is."""
    stalls = sum(finding["count"] for finding in found.stalls)
    lost_s = sum(finding["time_lost_s"] for finding in found.stalls)
    where = (f"{plural(len(document['captures']), 'capture')}, "
             f"{plural(len(document['connections']), 'connection')}")
    if stalls:
        verdict = (f"In short: {plural(stalls, 'Nagle-family stall')}, "
                   f"{duration_text(lost_s)} lost in {where}{_first_fix(document, found)}")
    else:
        verdict = f"In short: no Nagle-family stall in {where}{_costliest(found)}"
    has_code = any(advice["calls"] for advice in document["advice"].values())
    more = ([] if languages or not has_code else ["--fixes or --lang LANG for the code"]) + (
        [] if verbose else ["--verbose for every event"])
    return f"{verdict}." + (f" {'; '.join(more)}." if more else "")


def _first_fix(document: dict[str, Any], found: Diagnosis) -> str:
    first = found.stalls[0]["advice"][:1]
    if not first:
        return ""
    advice = document["advice"][first[0]]
    return f"; fix first: {advice['title']} ({advice['side']} side)"


def _costliest(found: Diagnosis) -> str:
    """The listed finding of another cause that lost the most time, if any lost time."""
    costs = [finding for _, finding in found.shown
             if finding["time_lost_s"] > 0 and finding["kind"] in kinds.OTHER_GAP_CAUSES]
    if not costs:
        return ""
    worst = max(costs, key=lambda finding: finding["time_lost_s"])
    return (f"; the most time lost: {KIND_TITLES.get(worst['kind'], worst['kind'])}, "
            f"{duration_text(worst['time_lost_s'])} on connection {worst['connection']}")


def render_text(document: dict[str, Any], verbose: bool = False, colour: bool = False,
                languages: Sequence[str] = ()) -> str:
    """The whole text report for a document built by `build_document`; `languages`: those
    HOW TO FIX gives the fixes' code in (none: no HOW TO FIX section)."""
    style = _Style(colour)
    found = diagnosis(document["findings"], None if verbose else FINDINGS_SHOWN)
    lines = [style.heading(document["headline"]["text"]), ""]
    if found.shown or found.folded:
        lines.append(style.heading("DIAGNOSIS (the Nagle family first, then other causes, each "
                                   "by time lost; idle time last)"))
        for rank, finding in found.shown:
            lines += _finding_lines(rank, finding, document, verbose, style) + [""]
        lines += _findings_left_out_line(found.left_out)
        lines += [""] if found.left_out else []
        lines += _folded_lines(document, found, verbose, style)
    lines += _how_to_fix(document, style, languages)
    lines += _hosts(document, style, verbose)
    lines += _parity(document, style, verbose)
    lines += _connections(document, stalls_by_connection(found.stalls), style, verbose)
    lines += _not_analysed(document, style, verbose)
    lines += _accounting(document, style, verbose)
    lines += ["", style.heading(_closing_line(document, found, languages, verbose))]
    return "\n".join(lines) + "\n"
