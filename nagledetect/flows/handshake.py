"""What the handshake says about a connection: MSS each way, window scale, SACK, timestamps.

The effective MSS (the payload a full segment carries) is the smaller announced MSS, less 12
bytes when both sides use timestamps (1460 -> 1448, SPEC section 3). Without a handshake it is
estimated, and flagged so. A sender never puts more than its MSS into one frame on the wire, so
the MSS is at least the largest payload seen that fits a frame; a payload too large for one is
a TSO/GSO/GRO super-segment and says nothing of the MSS. A frame fits when the payload, the IP
header (20 bytes for IPv4, 40 for IPv6), the TCP header (20) and the timestamp option (12,
where the connection uses timestamps) fit the Ethernet MTU of 1,500 bytes (a PPPoE link's 1,492
fits it too). So the estimate is the largest payload that fits an Ethernet frame, where it is
536 bytes or more; else the Ethernet frame's payload (1,460 for IPv4 without timestamps).

Jumbo frames (MTU 9,000) are taken where the frames show them: the largest payload over the
Ethernet limit that fits a jumbo frame is also the most frequent over that limit, is seen
twice or more, and is no multiple of the Ethernet frame's payload nor of the largest payload
seen that fits one (super-segments a receive offload builds are whole numbers of segments,
most often; bulk data over a jumbo link is mostly full segments).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from nagledetect.flows.connections import FLAG_ACK, FLAG_SYN

TIMESTAMP_OPTION_BYTES = 12
DEFAULT_MSS_BYTES = 536
SMALLEST_FULL_SEGMENT_BYTES = 536
ETHERNET_MTU_BYTES = 1500
JUMBO_MTU_BYTES = 9000
TCP_HEADER_BYTES = 20
IP_HEADER_BYTES = {4: 20, 6: 40}
MIN_JUMBO_FRAMES = 2

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


def handshake_table(packets: dict[str, np.ndarray], count: int, ip_version: np.ndarray
                    ) -> dict[str, np.ndarray]:
    """Columns of one row per connection (`ip_version` of each): the handshake's options and
    the effective MSS."""
    flags = packets["flags"]
    connection = packets["connection"]
    syn = _first_per_connection((flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN, connection, count)
    syn_ack = _first_per_connection((flags & (FLAG_SYN | FLAG_ACK)) == (FLAG_SYN | FLAG_ACK),
                                    connection, count)
    return handshake_columns(options_at(packets, syn), options_at(packets, syn_ack),
                             _uses_timestamps(packets, count), ip_version,
                             lambda needed: _size_counts(packets, needed))


def handshake_columns(syn: dict[str, np.ndarray], syn_ack: dict[str, np.ndarray],
                      uses_timestamps: np.ndarray, ip_version: np.ndarray,
                      size_counts: SizeCounts) -> dict[str, np.ndarray]:
    """The handshake table from each connection's first SYN and SYN/ACK (`options_at`: a frame
    of 0 where there is none), whether any of its packets carried timestamps, its IP version
    and its payload sizes where no handshake announced an MSS.

    `frame_payload_limit_bytes` is the largest payload one frame carries on the connection's
    link (Ethernet's, or a jumbo frame's where the estimate found jumbo frames): a payload over
    both it and the effective MSS is a super-segment."""
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
    limits = {mtu: frame_payload_bytes(mtu, ip_version, timestamps)
              for mtu in (ETHERNET_MTU_BYTES, JUMBO_MTU_BYTES)}
    estimate, jumbo = _estimated_mss(size_counts(estimated), limits)
    effective = np.where(estimated, estimate,
                         np.nan_to_num(smallest) - TIMESTAMP_OPTION_BYTES * timestamps)
    table["effective_mss"] = effective.astype(np.int64)
    table["frame_payload_limit_bytes"] = np.where(estimated & jumbo, limits[JUMBO_MTU_BYTES],
                                                  limits[ETHERNET_MTU_BYTES])
    return table


def frame_payload_bytes(mtu_bytes: int, ip_version: np.ndarray, timestamps: np.ndarray
                        ) -> np.ndarray:
    """The largest payload one frame of this MTU carries: the MTU less the IP header, the
    TCP header and, where the connection uses it, the timestamp option."""
    ip_header = np.where(np.asarray(ip_version) == 6, IP_HEADER_BYTES[6], IP_HEADER_BYTES[4])
    return (mtu_bytes - ip_header - TCP_HEADER_BYTES
            - TIMESTAMP_OPTION_BYTES * np.asarray(timestamps).astype(np.int64)).astype(np.int64)


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
    return (payload_bytes >= SMALLEST_FULL_SEGMENT_BYTES) & (payload_bytes <= JUMBO_MTU_BYTES)


def size_counts_of(connection: np.ndarray, size: np.ndarray) -> pd.DataFrame:
    """How often each (connection, payload size) occurs: columns connection, size, n."""
    return pd.DataFrame({"connection": connection, "size": size}).value_counts().reset_index(
        name="n")


def _size_counts(packets: dict[str, np.ndarray], needed: np.ndarray) -> pd.DataFrame:
    payload = packets["payload_bytes"]
    rows = full_looking(payload) & needed[packets["connection"]]
    return size_counts_of(packets["connection"][rows], payload[rows])


def _estimated_mss(counts: pd.DataFrame, limits: dict[int, np.ndarray]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Each connection's estimated MSS (see the module's docstring) from its full-looking
    payload sizes (`counts`), given the largest payload of an Ethernet and of a jumbo frame on
    it (`limits`, by MTU); and whether it shows jumbo frames."""
    ethernet = limits[ETHERNET_MTU_BYTES]
    estimate = ethernet.copy()
    jumbo = np.zeros(len(ethernet), dtype=bool)
    if not len(counts):
        return estimate, jumbo
    connection = counts["connection"].to_numpy()
    size = counts["size"].to_numpy().astype(np.int64)
    seen = counts["n"].to_numpy().astype(np.int64)
    fits = size <= ethernet[connection]
    largest_fitting = np.zeros(len(ethernet), dtype=np.int64)
    np.maximum.at(largest_fitting, connection[fits], size[fits])
    found = largest_fitting >= SMALLEST_FULL_SEGMENT_BYTES
    estimate[found] = largest_fitting[found]
    over = ~fits & (size <= limits[JUMBO_MTU_BYTES][connection])
    jumbo_size = _jumbo_frame_payloads(connection[over], size[over], seen[over], len(ethernet))
    for base in (ethernet, np.where(found, largest_fitting, ethernet)):
        jumbo_size[jumbo_size % base == 0] = 0
    jumbo = jumbo_size > 0
    estimate[jumbo] = jumbo_size[jumbo]
    return estimate, jumbo


def _jumbo_frame_payloads(connection: np.ndarray, size: np.ndarray, seen: np.ndarray,
                          count: int) -> np.ndarray:
    """Per connection, its largest payload over the Ethernet limit (rows of those, fitting a
    jumbo frame) where that is also the most frequent of them and seen `MIN_JUMBO_FRAMES` times
    or more; 0 elsewhere."""
    payload = np.zeros(count, dtype=np.int64)
    if not len(size):
        return payload
    largest = np.zeros(count, dtype=np.int64)
    np.maximum.at(largest, connection, size)
    most_seen = np.zeros(count, dtype=np.int64)
    np.maximum.at(most_seen, connection, seen)
    at_largest = size == largest[connection]
    chosen = at_largest & (seen == most_seen[connection]) & (seen >= MIN_JUMBO_FRAMES)
    payload[connection[chosen]] = size[chosen]
    return payload
