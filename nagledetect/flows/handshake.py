"""What the handshake says about a connection: MSS each way, window scale, SACK, timestamps.

The effective MSS (the payload a full segment carries) is the smaller announced MSS, less 12
bytes when both sides use timestamps (1460 -> 1448, SPEC section 3). Without a handshake it is
estimated: the most frequent payload size between 536 and 9000 bytes (full segments dominate a
connection that sends any), else the Ethernet default, and flagged as estimated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from nagledetect.flows.connections import FLAG_ACK, FLAG_SYN

TIMESTAMP_OPTION_BYTES = 12
DEFAULT_MSS_BYTES = 536
ETHERNET_MSS_BYTES = 1460
SMALLEST_FULL_SEGMENT_BYTES = 536
LARGEST_FULL_SEGMENT_BYTES = 9000

OPTION_COLUMNS = {"frame": 0, "opt_mss": 0, "opt_window_scale": -1, "opt_sack_permitted": False,
                  "opt_has_timestamp": False}
"""The columns of a SYN or SYN/ACK the table reads, and their values where there is none."""

SizeCounts = Callable[[np.ndarray], pd.DataFrame]
"""Given the connections whose MSS must be estimated, how often each full-looking payload size
occurs in each (columns connection, size, n)."""


def _first_per_connection(mask: np.ndarray, connection: np.ndarray, count: int) -> np.ndarray:
    """Row of the first packet of each connection selected by `mask` (-1 where none)."""
    rows = np.flatnonzero(mask)
    first = np.full(count, -1, dtype=np.int64)
    conn, position = np.unique(connection[rows], return_index=True)
    first[conn] = rows[position]
    return first


def options_at(packets: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The option columns at `rows` (-1: none, which takes the column's missing value)."""
    return {name: np.where(rows >= 0, packets[name][np.maximum(rows, 0)], missing)
            for name, missing in OPTION_COLUMNS.items()}


def handshake_table(packets: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray]:
    """Columns of one row per connection: the handshake's options and the effective MSS."""
    flags = packets["flags"]
    connection = packets["connection"]
    syn = _first_per_connection((flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN, connection, count)
    syn_ack = _first_per_connection((flags & (FLAG_SYN | FLAG_ACK)) == (FLAG_SYN | FLAG_ACK),
                                    connection, count)
    return handshake_columns(options_at(packets, syn), options_at(packets, syn_ack),
                             _uses_timestamps(packets, count),
                             lambda needed: _size_counts(packets, needed))


def handshake_columns(syn: dict[str, np.ndarray], syn_ack: dict[str, np.ndarray],
                      uses_timestamps: np.ndarray, size_counts: SizeCounts
                      ) -> dict[str, np.ndarray]:
    """The handshake table from each connection's first SYN and SYN/ACK (`options_at`: a frame
    of 0 where there is none), whether any of its packets carried timestamps, and its payload
    sizes where no handshake announced an MSS."""
    table = {"syn_frame": syn["frame"], "syn_ack_frame": syn_ack["frame"]}
    for side, options in (("client", syn), ("server", syn_ack)):
        table[f"mss_{side}"] = options["opt_mss"].astype(np.int64)
        table[f"window_scale_{side}"] = options["opt_window_scale"]
        table[f"sack_permitted_{side}"] = options["opt_sack_permitted"]
        table[f"timestamps_{side}"] = options["opt_has_timestamp"]
    seen = {name: options["frame"] > 0 for name, options in (("syn", syn), ("syn_ack", syn_ack))}
    handshake = seen["syn"] & seen["syn_ack"]
    table["handshake"] = handshake
    timestamps = table["timestamps_client"] & table["timestamps_server"] | (
        ~handshake & uses_timestamps)
    table["timestamps"] = timestamps
    table["window_scaling"] = (table["window_scale_client"] >= 0) & (
        table["window_scale_server"] >= 0)
    smallest = _smallest_announced_mss(table["mss_client"], table["mss_server"])
    smallest[np.isnan(smallest) & (seen["syn"] | seen["syn_ack"])] = DEFAULT_MSS_BYTES
    estimated = np.isnan(smallest)
    table["mss_estimated"] = estimated
    estimate = _estimated_mss(size_counts(estimated), timestamps)
    effective = np.where(estimated, estimate,
                         np.nan_to_num(smallest) - TIMESTAMP_OPTION_BYTES * timestamps)
    table["effective_mss"] = effective.astype(np.int64)
    return table


def _smallest_announced_mss(client: np.ndarray, server: np.ndarray) -> np.ndarray:
    """The smaller MSS of the two announced (an MSS of 0 was not announced), NaN where
    neither side announced one."""
    both = np.stack([client, server])
    announced = np.where(both > 0, both, np.nan)
    smallest = np.full(len(client), np.nan)
    either = ~np.isnan(announced).all(axis=0)
    smallest[either] = np.nanmin(announced[:, either], axis=0)
    return smallest


def _uses_timestamps(packets: dict[str, np.ndarray], count: int) -> np.ndarray:
    """Without a handshake: did the connection's packets carry the timestamp option."""
    uses = np.zeros(count, dtype=bool)
    uses[packets["connection"][packets["opt_has_timestamp"]]] = True
    return uses


def full_looking(payload_bytes: np.ndarray) -> np.ndarray:
    """Payloads the size of a full segment on some link: what an estimated MSS is taken from."""
    return (payload_bytes >= SMALLEST_FULL_SEGMENT_BYTES) & (
        payload_bytes <= LARGEST_FULL_SEGMENT_BYTES)


def size_counts_of(connection: np.ndarray, size: np.ndarray) -> pd.DataFrame:
    """How often each (connection, payload size) occurs: columns connection, size, n."""
    return pd.DataFrame({"connection": connection, "size": size}).value_counts().reset_index(
        name="n")


def _size_counts(packets: dict[str, np.ndarray], needed: np.ndarray) -> pd.DataFrame:
    payload = packets["payload_bytes"]
    rows = full_looking(payload) & needed[packets["connection"]]
    return size_counts_of(packets["connection"][rows], payload[rows])


def _estimated_mss(counts: pd.DataFrame, timestamps: np.ndarray) -> np.ndarray:
    """Most frequent full-looking payload size of each connection in `counts` (the smaller of
    two as frequent), else the Ethernet default."""
    estimate = ETHERNET_MSS_BYTES - TIMESTAMP_OPTION_BYTES * timestamps.astype(np.int64)
    if not len(counts):
        return estimate
    counts = counts.sort_values(["connection", "n", "size"], ascending=[True, False, True])
    mode = counts.drop_duplicates("connection")
    estimate[mode["connection"].to_numpy()] = mode["size"].to_numpy()
    return estimate
