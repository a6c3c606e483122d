"""Phase locking: delayed ACKs that fire on a host-wide clock tick (BSD's 200 ms; seed 000 section 9).

For each host, the emission times of its delayed ACKs are taken modulo a candidate tick (200 and
100 ms, and the fingerprinted timer when it is not Linux-like) and tested with the Rayleigh test
for a preferred phase. A per-connection timer (Linux) makes every holding time the same while
the phases wander with the data; a global tick makes the phases agree while the holding times
vary with when the data arrived. So a host is called locked only when the phase is significant
(p below 1e-3) and the holding times are not one constant timer (coefficient of variation above
0.15). Connections whose own mean phase lies within a tenth of the tick of the host's share it.
A locked host's delayed-ACK timer is its tick: the holding times it shows spread over the tick.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from nagledetect.detectors.delack_timer import sample_hosts
from nagledetect.detectors.model import Finding, HostProfile
from nagledetect.table import Table

KIND = "phase-lock"
GLOBAL_TICKS_MS = (200.0, 100.0)
MIN_SAMPLES = 10
LOCKED_P_VALUE = 1e-3
MIN_HOLD_VARIATION = 0.15
SHARED_PHASE_SHARE = 0.1
TICK_MATCH_SHARE = 0.1


def rayleigh(times_s: np.ndarray, group: np.ndarray, period_s: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group (codes 0..k-1, each with its own period): sample count, mean resultant length
    R, p-value (Zar's approximation) and mean phase (s) of the times modulo the period. Sums
    by `bincount`, so a capture with a million hosts is one pass."""
    count = np.bincount(group, minlength=len(period_s)).astype(np.float64)
    # Groups without a period (NaN: most hosts have no timer of their own to try) are left out
    # of the trigonometry and given NaN, as their NaN angles gave them.
    known = ~np.isnan(period_s)
    if not known.all():
        tested = known[group]
        group, times_s = group[tested], times_s[tested]
    period = period_s[group]
    angles = 2 * np.pi * np.mod(times_s, period) / period
    with np.errstate(invalid="ignore", divide="ignore"):
        cos_mean = np.where(known, np.bincount(group, np.cos(angles), len(period_s)) / count,
                            np.nan)
        sin_mean = np.where(known, np.bincount(group, np.sin(angles), len(period_s)) / count,
                            np.nan)
        length = np.hypot(cos_mean, sin_mean)
        resultant = count * length
        p_value = np.exp(np.sqrt(1 + 4 * count + 4 * (count ** 2 - resultant ** 2))
                         - (1 + 2 * count))
    phase_s = np.mod(np.arctan2(sin_mean, cos_mean), 2 * np.pi) / (2 * np.pi) * period_s
    return count, length, np.minimum(p_value, 1.0), phase_s


def _candidate_ticks_ms(profiles: list[HostProfile]) -> np.ndarray:
    """(hosts, 3): the global ticks, and the host's own timer when it is neither Linux-like nor
    one of them (NaN otherwise)."""
    ticks = np.full((len(profiles), len(GLOBAL_TICKS_MS) + 1), np.nan)
    ticks[:, :len(GLOBAL_TICKS_MS)] = GLOBAL_TICKS_MS
    for row, host in enumerate(profiles):
        timer = host.delack_timer_ms
        if timer and not host.stack_family.startswith("Linux") and all(
                abs(timer - tick) > TICK_MATCH_SHARE * tick for tick in GLOBAL_TICKS_MS):
            ticks[row, -1] = round(timer, 1)
    return ticks


def _hold_variation(hold_ms: np.ndarray, group: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Coefficient of variation of each group's holding times (0 when the mean is 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(group, hold_ms, len(count)) / count
        std = np.sqrt(np.bincount(group, (hold_ms - mean[group]) ** 2, len(count)) / count)
        return np.where(mean != 0, std / mean, 0.0)


def _sharing_connections(times_s: np.ndarray, host: np.ndarray, connection: np.ndarray,
                         period_s: np.ndarray, phase_s: np.ndarray
                         ) -> tuple[dict[int, list[int]], np.ndarray]:
    """Per host: its connections (3+ delayed ACKs) whose own mean phase is within a tenth of the
    tick of the host's; and how many connections each host's delayed ACKs came on."""
    width = int(connection.max()) + 1
    keys, pair = np.unique(host * width + connection, return_inverse=True)
    pair_host, pair_connection = np.divmod(keys, width)
    tested = np.bincount(pair_host, minlength=len(period_s))
    count, _, _, own_phase_s = rayleigh(times_s, pair, period_s[pair_host])
    period = period_s[pair_host]
    distance = np.abs(np.mod(own_phase_s - phase_s[pair_host] + period / 2, period) - period / 2)
    shares = (count >= 3) & (distance <= SHARED_PHASE_SHARE * period)
    sharing: dict[int, list[int]] = {}
    for owner, member in zip(pair_host[shares].tolist(), pair_connection[shares].tolist()):
        sharing.setdefault(owner, []).append(int(member))
    return sharing, tested


def lock_tests(hosts: Mapping[str, HostProfile], samples: Table) -> dict[str, dict]:
    """For every host with enough delayed ACKs: its best tick and whether it is locked to it."""
    delayed_rows = np.flatnonzero(np.asarray(samples["delayed"], dtype=bool))
    if len(delayed_rows) < MIN_SAMPLES:  # no host can have enough (most small captures)
        return {}
    codes, names = sample_hosts(samples, delayed_rows)
    enough = np.bincount(codes, minlength=len(names)) >= MIN_SAMPLES
    rows = np.flatnonzero(enough[codes]) if len(codes) else np.zeros(0, dtype=np.int64)
    if len(rows) == 0:
        return {}

    def delayed(name: str) -> np.ndarray:
        return np.asarray(samples[name])[delayed_rows][rows]

    kept = np.flatnonzero(enough)
    host = np.searchsorted(kept, codes[rows])
    times_s = delayed("ack_time_s")
    ticks_ms = _candidate_ticks_ms([hosts[names[code]] for code in kept.tolist()])
    results = [rayleigh(times_s, host, ticks_ms[:, column] / 1000)
               for column in range(ticks_ms.shape[1])]
    p_values = np.stack([np.where(np.isnan(r[2]), np.inf, r[2]) for r in results], axis=1)
    best = np.argmin(p_values, axis=1)
    pick = np.arange(len(kept))
    count = results[0][0]
    length = np.stack([r[1] for r in results], axis=1)[pick, best]
    phase_s = np.stack([r[3] for r in results], axis=1)[pick, best]
    period_s = ticks_ms[pick, best] / 1000
    variation = _hold_variation(delayed("hold_ms"), host, count)
    connection = delayed("connection").astype(np.int64)
    sharing, tested = _sharing_connections(times_s, host, connection, period_s, phase_s)
    tests = {}
    for index, code in enumerate(kept.tolist()):
        p_value = float(p_values[index, best[index]])
        tests[names[code]] = {
            "period_ms": float(ticks_ms[index, best[index]]),
            "rayleigh_r": round(float(length[index]), 4), "p_value": p_value,
            "n": int(count[index]), "phase_ms": round(float(phase_s[index]) * 1000, 3),
            "connections": sharing.get(index, []), "connections_tested": int(tested[index]),
            "hold_variation": round(float(variation[index]), 3),
            "locked": bool(p_value < LOCKED_P_VALUE and variation[index] > MIN_HOLD_VARIATION),
        }
    return tests


def stall_seconds_by_receiver(stall_findings: list[Finding]) -> Callable[[str], np.ndarray]:
    """The durations (s) of the stalls each receiving host caused, from stall findings."""
    by_receiver: dict[str, list[np.ndarray]] = {}
    for finding in stall_findings:
        if finding.receiver:
            by_receiver.setdefault(str(finding.receiver_host), []).append(finding.events.stall_s)
    return lambda address: np.concatenate([np.zeros(0)] + by_receiver.get(address, []))


def detect_hosts(hosts: Mapping[str, HostProfile], samples: Table,
                 stall_seconds: Callable[[str], np.ndarray]) -> list[Finding]:
    """Test every host with enough delayed-ACK samples (its profile's `phase_lock` is set to its
    test; the others are left alone); a phase-lock finding for each locked one (its time is
    already counted in the stall findings, so it adds none to the ranking).
    `stall_seconds` gives the durations of the stalls a host caused as receiver."""
    findings = []
    for address, lock in lock_tests(hosts, samples).items():
        host = hosts[address]
        host.phase_lock = lock
        if not lock["locked"]:
            continue
        host.delack_timer_ms = lock["period_ms"]
        host.stack_family = f"BSD-like ({lock['period_ms']:.0f} ms global tick)"
        stalls_ms = 1000 * stall_seconds(address)
        at_tick = np.abs(stalls_ms - lock["period_ms"]) <= TICK_MATCH_SHARE * lock["period_ms"]
        lock["stalls_at_tick_share"] = (round(float(at_tick.mean()), 3) if len(stalls_ms)
                                        else None)
        connection = lock["connections"][0] if lock["connections"] else int(host.ack_connections[0])
        findings.append(Finding(
            kind=KIND, connection=connection, sender=None, receiver=address, count=lock["n"],
            time_lost_s=0.0, share=0.0, confidence="high" if lock["p_value"] < 1e-6 else "medium",
            confidence_reasons=[f"Rayleigh p={lock['p_value']:.2g} over {lock['n']} delayed ACKs",
                                f"holding times vary (CV {lock['hold_variation']:.2f}) while the "
                                "emission phase stays fixed"],
            advice=["quickack", "single-write-nodelay", "double-buffer"],
            details=dict(lock),
            summary=(f"{address}'s delayed ACKs fire on a {lock['period_ms']:.0f} ms clock tick "
                     f"(phase {lock['phase_ms']:.1f} ms, shared by {len(lock['connections'])} "
                     f"connection{'s' if len(lock['connections']) != 1 else ''})"),
        ))
    return findings
