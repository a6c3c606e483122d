"""The CI gate: budgets checked against a result document, capture by capture.

Budgets come from `[tool.nagledetect]` in pyproject.toml or from nagledetect.toml (keys as the
command-line flags: max-stalls, max-stall-time, max-stall-share, fail-on, tolerance,
min-confidence); flags given on the command line win. With min-confidence, findings of a lower
confidence count toward no budget (nor in the baseline), and the verdict says how many were
left out. A baseline is an earlier `analyze --format json` document: a capture
fails only where its stalls grew beyond the tolerance. It reads the document only.

The gate fails safe: "stalls" are the whole Nagle family (kinds.NAGLE_FAMILY), with no budget
configured it allows none of them, a kind it does not know is an input error, and a capture with
no TCP packet to look at is an error, never a pass.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nagledetect.chunked import RECORDS_PER_CHUNK, take
from nagledetect.detectors.kinds import ALL_KINDS, CONFIDENCE_LEVELS, NAGLE_FAMILY
from nagledetect.errors import InputError
from nagledetect.report.document import kinds_and_times
from nagledetect.report.headline import is_upper_bound

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

CONFIG_KEYS = ("max-stalls", "max-stall-time", "max-stall-share", "fail-on", "tolerance",
               "min-confidence")
DEFAULT_TOLERANCE = 0.1
DEFAULT_MAX_STALLS = 0
"""The budget when none is configured (no max-*, no fail-on, no baseline): any Nagle-family
stall fails, as a gate that passes everything would vouch for nothing."""
CHECKABLE_RULE = "checkable"
"""The rule a capture with no TCP packet to look at fails (as an error: nothing was checked)."""
NO_PACKETS_TEXT = "no packets (a capture file header only): nothing to check"
NO_TCP_TEXT = "no TCP packet: nothing to check"


@dataclass
class Budgets:
    max_stalls: int | None = None
    max_stall_time_s: float | None = None
    max_stall_share: float | None = None
    fail_on: tuple[str, ...] = ()
    tolerance: float = DEFAULT_TOLERANCE
    min_confidence: str = CONFIDENCE_LEVELS[0]
    """Findings of a lower confidence count toward no budget."""
    defaulted: bool = False
    """True when no budget was configured and `DEFAULT_MAX_STALLS` stands in."""

    def counts(self, finding: dict[str, Any]) -> bool:
        """Whether a document's finding is confident enough to count."""
        return (CONFIDENCE_LEVELS.index(finding["confidence"]["level"])
                >= CONFIDENCE_LEVELS.index(self.min_confidence))

    def with_default(self, has_baseline: bool) -> Budgets:
        """These budgets, or the default when none is configured and no baseline given."""
        configured = (self.max_stalls, self.max_stall_time_s, self.max_stall_share)
        if has_baseline or self.fail_on or any(value is not None for value in configured):
            return self
        return Budgets(max_stalls=DEFAULT_MAX_STALLS, tolerance=self.tolerance,
                       min_confidence=self.min_confidence, defaulted=True)


@dataclass
class RuleResult:
    """One rule on one capture; `message` says why it failed (connection, count, time, fix)."""

    capture: str
    rule: str
    passed: bool
    message: str
    position: int
    """The capture's place among the run's captures: a file named twice is checked twice, and
    reported on twice, each line for its own run."""
    error: bool = False
    """The rule could not be checked (a capture with no TCP packet): exit status 2, not 1."""


@dataclass
class _Baseline:
    """An earlier document, indexed once: each capture file name's first position, and each
    capture's findings."""

    positions: dict[str, int]
    findings: dict[int, list[dict[str, Any]]]

    @classmethod
    def of(cls, document: dict[str, Any]) -> _Baseline:
        positions: dict[str, int] = {}
        for index, capture in enumerate(document.get("captures", [])):
            positions.setdefault(Path(capture["path"]).name, index)
        return cls(positions, _by_capture(document.get("findings", [])))


def load_config(directory: Path) -> dict[str, Any]:
    """Budgets from nagledetect.toml, else from pyproject.toml's [tool.nagledetect] table, each
    value checked (a wrong one is an input error naming the file, never a silent pass)."""
    for name, table in (("nagledetect.toml", None), ("pyproject.toml", ("tool", "nagledetect"))):
        path = directory / name
        if not path.exists():
            continue
        try:
            data = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise InputError(f"{path}: not valid TOML ({error})") from None
        for key in table or ():
            data = data.get(key, {})
        if data:
            unknown = sorted(set(data) - set(CONFIG_KEYS))
            if unknown:
                raise InputError(f"{path}: unknown budget key(s) {', '.join(unknown)}")
            return _checked_config(data, path)
    return {}


def _checked_config(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The file's budgets, with the ranges the command line's flags have; fail-on as kinds."""
    ranges = {"max-stalls": (0, None), "max-stall-time": (0, None), "max-stall-share": (0, 1),
              "tolerance": (0, None)}
    for key, (low, high) in ranges.items():
        if key in data:
            _check_number(data[key], key, low, high, whole=key == "max-stalls", path=path)
    checked = dict(data)
    if "fail-on" in data:
        checked["fail-on"] = fail_on_kinds(data["fail-on"], f"{path}: fail-on")
    if "min-confidence" in data and data["min-confidence"] not in CONFIDENCE_LEVELS:
        raise InputError(f"{path}: min-confidence must be one of {', '.join(CONFIDENCE_LEVELS)}, "
                         f"not {data['min-confidence']!r}")
    return checked


def _check_number(value: Any, key: str, low: float, high: float | None, whole: bool,
                  path: Path) -> None:
    types = (int,) if whole else (int, float)
    in_range = (isinstance(value, types) and not isinstance(value, bool) and value >= low
                and (high is None or value <= high))
    if not in_range:
        wanted = "a whole number" if whole else "a number"
        bounds = f"from {low} to {high}" if high is not None else f"of {low} or more"
        raise InputError(f"{path}: {key} must be {wanted} {bounds}, not {value!r}")


def fail_on_kinds(value: Any, where: str) -> tuple[str, ...]:
    """The kinds of a fail-on value ("a,b" or a TOML list of names), each one a kind of
    kinds.ALL_KINDS: a misspelled kind would match no finding and pass every capture."""
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise InputError(f"{where}: a kind name or a list of them, not {value!r}")
    kinds = tuple(name.strip() for name in names if name.strip())
    unknown = [kind for kind in kinds if kind not in ALL_KINDS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], ALL_KINDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"{where}: unknown kind {unknown[0]!r}{hint}; known kinds: "
                         f"{', '.join(ALL_KINDS)}")
    return kinds


def budgets_from(config: dict[str, Any], flags: dict[str, Any]) -> Budgets:
    """Merge the file's budgets (from `load_config`) with the command line's (flags win; the
    flag --fail-on's kinds are checked here)."""
    given = {key: value for key, value in flags.items() if value is not None}
    if "fail-on" in given:
        given["fail-on"] = fail_on_kinds(given["fail-on"], "--fail-on")
    merged = {**config, **given}
    return Budgets(
        max_stalls=merged.get("max-stalls"), max_stall_time_s=merged.get("max-stall-time"),
        max_stall_share=merged.get("max-stall-share"), fail_on=merged.get("fail-on", ()),
        tolerance=float(merged.get("tolerance", DEFAULT_TOLERANCE)),
        min_confidence=merged.get("min-confidence", CONFIDENCE_LEVELS[0]))


def _fix(finding: dict[str, Any], document: dict[str, Any]) -> str:
    key = finding["advice"][0] if finding["advice"] else None
    return document["advice"][key]["title"] if key in document.get("advice", {}) else "see report"


def _describe(findings: list[dict[str, Any]], document: dict[str, Any]) -> str:
    """The finding that lost the most time: where, how much (as an upper bound where it is
    one), of what confidence when low, and the fix."""
    worst = max(findings, key=lambda f: f["time_lost_s"])
    bound = "up to " if is_upper_bound(worst) else ""
    low = (" (low confidence; --min-confidence medium leaves such findings out)"
           if worst.get("confidence", {}).get("level") == "low" else "")
    return (f"connection {worst['connection']} ({worst['sender']} -> {worst['receiver']}): "
            f"{worst['count']} x {worst['kind']}{low}, {bound}{worst['time_lost_s']:.3f} s "
            f"lost; fix: {_fix(worst, document)}")


def _nagle_family(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f["kind"] in NAGLE_FAMILY]


def _stall_totals(findings: list[dict[str, Any]]) -> tuple[int, float, float]:
    """The Nagle family's stalls, time lost, and the largest share of one connection's time
    they took (a connection's findings of the family summed: one per direction and kind)."""
    stalls = _nagle_family(findings)
    shares: dict[Any, float] = {}
    for finding in stalls:
        shares[finding["connection"]] = shares.get(finding["connection"], 0.0) + finding["share"]
    return (sum(f["count"] for f in stalls), sum(f["time_lost_s"] for f in stalls),
            max(shares.values(), default=0.0))


def evaluate(document: dict[str, Any], budgets: Budgets,
             baseline: dict[str, Any] | None = None,
             bpf_filter: str | None = None) -> list[RuleResult]:
    """Every configured rule on every capture of the document (`bpf_filter`: the run's, named
    where it left a capture no TCP packet). The findings (read from disk a chunk at a time) are
    gone through once, not once per capture: a gate over thousands of captures would otherwise
    read them thousands of times."""
    findings = _by_capture(_rule_findings(document["findings"], {*NAGLE_FAMILY, *budgets.fail_on}))
    previous = None if baseline is None else _Baseline.of(baseline)
    results = []
    for index, capture in enumerate(document["captures"]):
        reason = _unchecked_reason(capture, bpf_filter)
        if reason:
            results.append(RuleResult(capture["path"], CHECKABLE_RULE, False, reason, index,
                                      error=True))
            continue
        results += _capture_rules(index, capture["path"], findings.get(index, []), document,
                                  budgets, previous)
    return results


def _unchecked_reason(capture: dict[str, Any], bpf_filter: str | None) -> str | None:
    """Why the gate cannot vouch for a capture it read, if it cannot: no packet, or no TCP
    packet (all filtered out, or none there): no rule can fail on it, so none may pass it."""
    if capture["packets"] == 0:
        return NO_PACKETS_TEXT
    if capture["tcp_packets"] > 0:
        return None
    if bpf_filter is not None:
        return f"the filter {bpf_filter!r} leaves no TCP packet: nothing to check"
    return NO_TCP_TEXT


def _rule_findings(findings: Sequence[dict[str, Any]], kinds: set[str]
                   ) -> Iterator[dict[str, Any]]:
    """The findings of the kinds the rules read. A document's are picked by their kinds, and
    only those are read from disk, a chunk at a time (the 10 M mix: its 7,040 stalls, not all
    76,544 findings)."""
    wanted = [position for position, kind in enumerate(kinds_and_times(findings)[0])
              if kind in kinds]
    for start in range(0, len(wanted), RECORDS_PER_CHUNK):
        yield from take(findings, wanted[start:start + RECORDS_PER_CHUNK])


def _by_capture(findings: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Each capture's findings, without their evidence rows (no rule reads them)."""
    grouped: dict[int, list[dict[str, Any]]] = {}
    for finding in findings:
        grouped.setdefault(finding.get("capture"), []).append(
            {key: value for key, value in finding.items() if key != "events"})
    return grouped


def _capture_rules(position: int, path: str, all_findings: list[dict[str, Any]],
                   document: dict[str, Any], budgets: Budgets, baseline: _Baseline | None
                   ) -> list[RuleResult]:
    findings = [finding for finding in all_findings if budgets.counts(finding)]
    left_out = _left_out_words(len(all_findings) - len(findings), budgets.min_confidence)
    count, time_s, share = _stall_totals(findings)
    stalls = _nagle_family(findings)
    checks = []
    if budgets.max_stalls is not None:
        default = " (the default: no budget configured)" if budgets.defaulted else ""
        checks.append(("max-stalls", count <= budgets.max_stalls,
                       f"{count} stalls, budget {budgets.max_stalls}{default}", stalls))
    if budgets.max_stall_time_s is not None:
        checks.append(("max-stall-time", time_s <= budgets.max_stall_time_s,
                       f"{time_s:.3f} s in stalls, budget {budgets.max_stall_time_s} s", stalls))
    if budgets.max_stall_share is not None:
        checks.append(("max-stall-share", share <= budgets.max_stall_share,
                       f"worst connection {share * 100:.1f}% stalled, budget "
                       f"{budgets.max_stall_share * 100:.1f}%", stalls))
    for kind in budgets.fail_on:
        hits = [f for f in findings if f["kind"] == kind]
        checks.append((f"fail-on {kind}", not hits, f"{len(hits)} {kind} finding(s)", hits))
    if baseline is not None:
        checks.append(_baseline_check(path, count, time_s, baseline, budgets, stalls))
    results = []
    for rule, passed, summary, evidence in checks:
        summary += left_out
        message = summary if passed or not evidence else f"{summary}; {_describe(evidence, document)}"
        results.append(RuleResult(path, rule, passed, message, position))
    return results


def _left_out_words(count: int, min_confidence: str) -> str:
    if not count:
        return ""
    below = CONFIDENCE_LEVELS[:CONFIDENCE_LEVELS.index(min_confidence)]
    return f" ({count} finding(s) of {' or '.join(below)} confidence not counted)"


def _baseline_check(path: str, count: int, time_s: float, baseline: _Baseline,
                    budgets: Budgets, stalls: list[dict[str, Any]]) -> tuple:
    name = Path(path).name
    index = baseline.positions.get(name)
    if index is None:
        return ("baseline", True, f"{name} not in the baseline: nothing to compare", [])
    old_count, old_time_s, _ = _stall_totals(
        [finding for finding in baseline.findings.get(index, []) if budgets.counts(finding)])
    tolerance = budgets.tolerance
    allowed_count = old_count * (1 + tolerance)
    allowed_time_s = old_time_s * (1 + tolerance) + 1e-9
    passed = count <= allowed_count and time_s <= allowed_time_s
    return ("baseline", passed, f"{count} stalls / {time_s:.3f} s against baseline {old_count} / "
            f"{old_time_s:.3f} s (tolerance {tolerance * 100:.0f}%)", stalls)
