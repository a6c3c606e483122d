"""The role of every packet in its connection: data, pure ACK, retransmission, keep-alive...

Roles follow the meanings Wireshark's TCP analysis gives them, so a user can cross-check a
frame: retransmission (data, SYN or FIN at sequence space already sent), out-of-order (old
sequence space within 3 ms of the segment that last advanced the stream, not ending where the
stream had got to),
keep-alive (one byte or none at next-sequence minus one), zero-window probe (one new byte sent
into a zero window), duplicate ACK (bare ACK repeating the previous ACK and a non-zero window),
window update (same ACK and sequence, new window). RST wins over everything.
"""

from __future__ import annotations

import numpy as np

from nagledetect.flows.connections import FLAG_FIN, FLAG_RST, FLAG_SYN
from nagledetect.flows.grouped import grouped_cummax, last_index_where, previous_in_group

ROLES = (
    "data", "pure_ack", "window_update", "dup_ack", "retransmission", "out_of_order",
    "keepalive", "zero_window_probe", "syn", "fin", "rst",
)
ROLE = {name: code for code, name in enumerate(ROLES)}
OUT_OF_ORDER_WINDOW_US = 3_000
NONE_YET = -(1 << 62)


def assign_roles(direction_view: dict[str, np.ndarray], starts: np.ndarray,
                 peer: dict[str, np.ndarray]) -> np.ndarray:
    """Role code per packet; inputs are in direction order (connection, direction, time).

    `peer` holds the other direction's latest `window_raw`, `rel_seq`, `payload_bytes`, `flags` at
    each packet's time (-1 when it has sent nothing yet).
    """
    flags = direction_view["flags"]
    payload = direction_view["payload_bytes"].astype(np.int64)
    seq = direction_view["rel_seq"]
    ack = direction_view["rel_ack"]
    window = direction_view["window_raw"].astype(np.int64)
    time_us = direction_view["time_us"]
    end = seq + payload + ((flags & (FLAG_SYN | FLAG_FIN)) != 0)
    max_end_before = previous_in_group(grouped_cummax(end, starts), starts, NONE_YET)
    has_previous = ~starts
    role = np.full(len(flags), ROLE["pure_ack"], dtype=np.uint8)

    carries_data = payload > 0
    fin_or_syn = (flags & (FLAG_FIN | FLAG_SYN)) != 0
    keepalive = has_previous & (payload <= 1) & (seq == max_end_before - 1) & ~fin_or_syn
    old_data = has_previous & (seq < max_end_before) & ~keepalive
    advanced = last_index_where(end > max_end_before, starts)
    since_advance_us = time_us - time_us[np.maximum(advanced, 0)]
    fills_hole = (end != max_end_before) & (since_advance_us < OUT_OF_ORDER_WINDOW_US)
    probe = (payload == 1) & (seq == max_end_before) & (peer["window_raw"] == 0)
    answers_keepalive = (peer["payload_bytes"] <= 1) & (ack == peer["rel_seq"] + 1) & (
        (peer["flags"] & (FLAG_SYN | FLAG_FIN)) == 0)

    same_ack = has_previous & (ack == previous_in_group(ack, starts, NONE_YET))
    same_window = window == previous_in_group(window, starts, -1)
    same_seq = seq == previous_in_group(seq, starts, NONE_YET)
    bare = ~carries_data & ((flags & (FLAG_SYN | FLAG_FIN | FLAG_RST)) == 0)
    role[carries_data] = ROLE["data"]
    role[bare & same_ack & same_seq & ~same_window] = ROLE["window_update"]
    role[bare & same_ack & same_window & (window != 0) & ~answers_keepalive] = ROLE["dup_ack"]
    role[probe] = ROLE["zero_window_probe"]
    role[~carries_data & ((flags & FLAG_FIN) != 0)] = ROLE["fin"]
    role[(flags & FLAG_SYN) != 0] = ROLE["syn"]
    role[(carries_data | fin_or_syn) & old_data] = ROLE["retransmission"]
    role[carries_data & old_data & fills_hole] = ROLE["out_of_order"]
    role[keepalive] = ROLE["keepalive"]
    role[(flags & FLAG_RST) != 0] = ROLE["rst"]
    return role
