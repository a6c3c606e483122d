"""Fingerprint each receiving host's delayed-ACK timer from the data, never from an assumption.

A sample is the pure ACK that answers a lone unacknowledged segment: when the segment left,
everything before it was acknowledged; the sender sent no more data and the receiver no data
before that ACK. The receiver's holding time is the ACK's lag at the tap minus the round trip
between the tap and the receiver. Holding times of 10 ms or more (and well above the RTT) are
delayed ACKs; their mode is the timer. Stack families by timer (SPEC section 2): Linux 40 ms
minimum, BSD/macOS about 100 ms, Windows 200 ms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nagledetect.detectors.model import HostProfile
from nagledetect.events.segments import PURE_ACK_ROLES

MIN_DELAYED_HOLD_MS = 10.0
RTT_MULTIPLE = 1.5
HISTOGRAM_BIN_MS = 2.0
MODE_WINDOW = 0.2
STACK_FAMILIES = (
    (30.0, 70.0, "Linux-like (40 ms)"),
    (70.0, 150.0, "BSD/macOS-like (100 ms)"),
    (150.0, 300.0, "Windows-like (200 ms)"),
)


def receiver_side_rtt_ms(connections: pd.DataFrame, connection: np.ndarray,
                          direction: np.ndarray) -> np.ndarray:
    """Round trip between the tap and the receiver of each (connection, direction); 0 if unknown."""
    table = connections.set_index("id")
    to_server = table["rtt_server_side_ms"].reindex(connection).to_numpy()
    to_client = table["rtt_client_side_ms"].reindex(connection).to_numpy()
    return np.nan_to_num(np.where(direction == 0, to_server, to_client), nan=0.0)


def delack_samples(segments: pd.DataFrame, connections: pd.DataFrame) -> pd.DataFrame:
    """Delayed-ACK holding times, one row per lone segment answered by a pure ACK."""
    lone = segments[
        (segments["peer_ack"] >= segments["rel_seq"])
        & segments["next_peer_role"].isin(PURE_ACK_ROLES)
        & (segments["next_peer_ack"] >= segments["end_seq"])
        & ((segments["next_own_data_time_us"] < 0)
           | (segments["next_own_data_time_us"] > segments["next_peer_time_us"]))
    ]
    lag_ms = (lone["next_peer_time_us"] - lone["time_us"]).to_numpy() / 1000
    rtt_ms = receiver_side_rtt_ms(connections, lone["connection"].to_numpy(),
                                  lone["direction"].to_numpy())
    table = connections.set_index("id")
    total_rtt_ms = np.nan_to_num(table["rtt_ms"].reindex(lone["connection"]).to_numpy(), nan=0.0)
    hold_ms = lag_ms - rtt_ms
    receiver = np.where(lone["direction"].to_numpy() == 0,
                        table["server_address"].reindex(lone["connection"]).to_numpy(),
                        table["client_address"].reindex(lone["connection"]).to_numpy())
    samples = pd.DataFrame({
        "host": receiver,
        "connection": lone["connection"].to_numpy(),
        "data_frame": lone["frame"].to_numpy(),
        "ack_frame": lone["next_peer_frame"].to_numpy(),
        "ack_time_s": lone["next_peer_time_us"].to_numpy() / 1e6,
        "hold_ms": hold_ms,
        "delayed": hold_ms >= np.maximum(MIN_DELAYED_HOLD_MS, RTT_MULTIPLE * total_rtt_ms),
    })
    return samples


def _modal_timer(hold_ms: np.ndarray) -> tuple[float, float]:
    """The timer (median of the samples around the histogram mode) and its interquartile spread."""
    bins = np.arange(0.0, max(float(hold_ms.max()), HISTOGRAM_BIN_MS) + HISTOGRAM_BIN_MS,
                     HISTOGRAM_BIN_MS)
    counts, edges = np.histogram(hold_ms, bins=bins)
    centre = (edges[np.argmax(counts)] + edges[np.argmax(counts) + 1]) / 2
    near = hold_ms[np.abs(hold_ms - centre) <= MODE_WINDOW * centre + HISTOGRAM_BIN_MS]
    quartiles = np.percentile(near, [25, 75])
    return float(np.median(near)), float(quartiles[1] - quartiles[0])


def stack_family(timer_ms: float | None) -> str:
    if timer_ms is None:
        return "unknown"
    for low, high, name in STACK_FAMILIES:
        if low <= timer_ms < high:
            return name
    return "other"


def fingerprint_hosts(samples: pd.DataFrame) -> dict[str, HostProfile]:
    """One profile per host that acknowledged a lone segment at least once."""
    ordered = samples.sort_values("host", kind="stable")
    hosts = ordered["host"].to_numpy()
    if len(hosts) == 0:
        return {}
    starts = np.flatnonzero(np.r_[True, hosts[1:] != hosts[:-1]])
    bounds = zip(starts, np.r_[starts[1:], len(hosts)])
    hold_ms = ordered["hold_ms"].to_numpy()
    delayed = ordered["delayed"].to_numpy()
    ack_time_s = ordered["ack_time_s"].to_numpy()
    connection = ordered["connection"].to_numpy()
    profiles: dict[str, HostProfile] = {}
    for begin, end in bounds:
        mask = delayed[begin:end]
        holds = hold_ms[begin:end]
        timer_ms = spread_ms = None
        if mask.any():
            timer_ms, spread_ms = _modal_timer(holds[mask])
        address = str(hosts[begin])
        profiles[address] = HostProfile(
            address=address, delack_timer_ms=timer_ms, delack_spread_ms=spread_ms,
            delack_samples=int(mask.sum()), stack_family=stack_family(timer_ms),
            delays_ms=np.round(holds, 3),
            ack_times_s=ack_time_s[begin:end][mask],
            ack_connections=connection[begin:end][mask].astype(np.int64))
    return profiles
