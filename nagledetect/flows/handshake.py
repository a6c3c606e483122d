"""What the handshake says about a connection: MSS each way, window scale, SACK, timestamps.

The effective MSS (the payload a full segment carries) is the smaller announced MSS, less 12
bytes when both sides use timestamps (1460 -> 1448, SPEC section 3). Without a handshake it is
estimated: the most frequent payload size between 536 and 9000 bytes (full segments dominate a
connection that sends any), else the Ethernet default, and flagged as estimated.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nagledetect.flows.connections import FLAG_ACK, FLAG_SYN

TIMESTAMP_OPTION_BYTES = 12
DEFAULT_MSS_BYTES = 536
ETHERNET_MSS_BYTES = 1460
SMALLEST_FULL_SEGMENT_BYTES = 536
LARGEST_FULL_SEGMENT_BYTES = 9000


def _first_per_connection(mask: np.ndarray, connection: np.ndarray, count: int) -> np.ndarray:
    """Row of the first packet of each connection selected by `mask` (-1 where none)."""
    rows = np.flatnonzero(mask)
    first = np.full(count, -1, dtype=np.int64)
    conn, position = np.unique(connection[rows], return_index=True)
    first[conn] = rows[position]
    return first


def handshake_table(packets: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray]:
    """Columns of one row per connection: the handshake's options and the effective MSS."""
    flags = packets["flags"]
    connection = packets["connection"]
    syn = _first_per_connection((flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN, connection, count)
    syn_ack = _first_per_connection((flags & (FLAG_SYN | FLAG_ACK)) == (FLAG_SYN | FLAG_ACK),
                                    connection, count)
    table = {"syn_frame": _take(packets["frame"], syn, 0),
             "syn_ack_frame": _take(packets["frame"], syn_ack, 0)}
    for side, rows in (("client", syn), ("server", syn_ack)):
        table[f"mss_{side}"] = _take(packets["opt_mss"], rows, 0).astype(np.int64)
        table[f"window_scale_{side}"] = _take(packets["opt_window_scale"], rows, -1)
        table[f"sack_permitted_{side}"] = _take(packets["opt_sack_permitted"], rows, False)
        table[f"timestamps_{side}"] = _take(packets["opt_has_timestamp"], rows, False)
    handshake = (syn >= 0) & (syn_ack >= 0)
    table["handshake"] = handshake
    timestamps = table["timestamps_client"] & table["timestamps_server"] | (
        ~handshake & _uses_timestamps(packets, count))
    table["timestamps"] = timestamps
    table["window_scaling"] = (table["window_scale_client"] >= 0) & (
        table["window_scale_server"] >= 0)
    smallest = _smallest_announced_mss(table["mss_client"], table["mss_server"])
    seen_syn = (syn >= 0) | (syn_ack >= 0)
    smallest[np.isnan(smallest) & seen_syn] = DEFAULT_MSS_BYTES
    estimated = np.isnan(smallest)
    table["mss_estimated"] = estimated
    estimate = _estimated_mss(packets, estimated, timestamps)
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


def _take(values: np.ndarray, rows: np.ndarray, missing) -> np.ndarray:
    return np.where(rows >= 0, values[np.maximum(rows, 0)], missing)


def _uses_timestamps(packets: dict[str, np.ndarray], count: int) -> np.ndarray:
    """Without a handshake: did the connection's packets carry the timestamp option."""
    uses = np.zeros(count, dtype=bool)
    uses[packets["connection"][packets["opt_has_timestamp"]]] = True
    return uses


def _estimated_mss(packets: dict[str, np.ndarray], needed: np.ndarray,
                   timestamps: np.ndarray) -> np.ndarray:
    """Most frequent full-looking payload size of each connection whose MSS is `needed` (no
    handshake announced one), else the Ethernet default."""
    default = ETHERNET_MSS_BYTES - TIMESTAMP_OPTION_BYTES * timestamps.astype(np.int64)
    payload = packets["payload_bytes"]
    full_looking = ((payload >= SMALLEST_FULL_SEGMENT_BYTES)
                    & (payload <= LARGEST_FULL_SEGMENT_BYTES) & needed[packets["connection"]])
    if not full_looking.any():
        return default
    sizes = pd.DataFrame({"connection": packets["connection"][full_looking],
                          "size": payload[full_looking]})
    counts = sizes.value_counts().reset_index(name="n")
    counts = counts.sort_values(["connection", "n", "size"], ascending=[True, False, True])
    mode = counts.drop_duplicates("connection")
    estimate = default.copy()
    estimate[mode["connection"].to_numpy()] = mode["size"].to_numpy()
    return estimate
