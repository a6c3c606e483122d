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

import math

import numpy as np

from nagledetect.detectors.model import Finding, HostProfile

KIND = "phase-lock"
GLOBAL_TICKS_MS = (200.0, 100.0)
MIN_SAMPLES = 10
LOCKED_P_VALUE = 1e-3
MIN_HOLD_VARIATION = 0.15
SHARED_PHASE_SHARE = 0.1
TICK_MATCH_SHARE = 0.1


def rayleigh(times_s: np.ndarray, period_s: float) -> tuple[float, float, float]:
    """Mean resultant length R, p-value (Zar's approximation) and mean phase (s) of times mod period."""
    angles = 2 * np.pi * np.mod(times_s, period_s) / period_s
    count = len(angles)
    cos_mean, sin_mean = float(np.cos(angles).mean()), float(np.sin(angles).mean())
    length = math.hypot(cos_mean, sin_mean)
    resultant = count * length
    p_value = math.exp(math.sqrt(1 + 4 * count + 4 * (count ** 2 - resultant ** 2)) - (1 + 2 * count))
    phase_s = (math.atan2(sin_mean, cos_mean) % (2 * math.pi)) / (2 * math.pi) * period_s
    return length, min(p_value, 1.0), phase_s


def _candidate_ticks_ms(host: HostProfile) -> list[float]:
    ticks = list(GLOBAL_TICKS_MS)
    timer = host.delack_timer_ms
    if timer and not host.stack_family.startswith("Linux") and all(
            abs(timer - tick) > TICK_MATCH_SHARE * tick for tick in ticks):
        ticks.append(round(timer, 1))
    return ticks


def _sharing_connections(times_s: np.ndarray, connections: np.ndarray, period_s: float,
                         phase_s: float) -> list[int]:
    sharing = []
    for connection in np.unique(connections):
        own = times_s[connections == connection]
        if len(own) < 3:
            continue
        _, _, own_phase_s = rayleigh(own, period_s)
        distance = abs((own_phase_s - phase_s + period_s / 2) % period_s - period_s / 2)
        if distance <= SHARED_PHASE_SHARE * period_s:
            sharing.append(int(connection))
    return sharing


def lock_test(host: HostProfile, hold_ms: np.ndarray) -> dict | None:
    """The best tick for this host and whether its delayed ACKs are locked to it."""
    times_s = np.asarray(host.ack_times_s)
    if len(times_s) < MIN_SAMPLES:
        return None
    connections = np.asarray(host.ack_connections)
    best = min(((tick,) + rayleigh(times_s, tick / 1000) for tick in _candidate_ticks_ms(host)),
               key=lambda result: result[2])
    tick_ms, length, p_value, phase_s = best
    variation = float(np.std(hold_ms) / np.mean(hold_ms)) if len(hold_ms) and np.mean(hold_ms) else 0.0
    sharing = _sharing_connections(times_s, connections, tick_ms / 1000, phase_s)
    return {
        "period_ms": tick_ms, "rayleigh_r": round(length, 4), "p_value": p_value,
        "n": int(len(times_s)), "phase_ms": round(phase_s * 1000, 3),
        "connections": sharing, "connections_tested": int(len(np.unique(connections))),
        "hold_variation": round(variation, 3),
        "locked": bool(p_value < LOCKED_P_VALUE and variation > MIN_HOLD_VARIATION),
    }


def detect_hosts(hosts: dict[str, HostProfile], hold_ms_by_host: dict[str, np.ndarray],
                 stall_findings: list[Finding]) -> list[Finding]:
    """Test every host; a phase-lock finding for each locked one (its time is already counted in
    the stall findings, so it adds none to the ranking)."""
    findings = []
    for address, host in hosts.items():
        host.phase_lock = lock_test(host, hold_ms_by_host.get(address, np.zeros(0)))
        if not host.phase_lock or not host.phase_lock["locked"]:
            continue
        lock = host.phase_lock
        host.delack_timer_ms = lock["period_ms"]
        host.stack_family = f"BSD-like ({lock['period_ms']:.0f} ms global tick)"
        stalls_ms = 1000 * np.concatenate([np.zeros(0)] + [
            finding.events.stall_s for finding in stall_findings
            if finding.receiver and finding.receiver.rsplit(":", 1)[0].strip("[]") == address])
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
