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

import numba
import numpy as np

from nagledetect.flows.connections import FLAG_FIN, FLAG_RST, FLAG_SYN

ROLES = (
    "data", "pure_ack", "window_update", "dup_ack", "retransmission", "out_of_order",
    "keepalive", "zero_window_probe", "syn", "fin", "rst",
)
ROLE = {name: code for code, name in enumerate(ROLES)}
OUT_OF_ORDER_WINDOW_US = 3_000
NONE_YET = -(1 << 62)

_DATA, _PURE_ACK, _WINDOW_UPDATE, _DUP_ACK, _RETRANSMISSION, _OUT_OF_ORDER, _KEEPALIVE, \
    _ZERO_WINDOW_PROBE, _SYN, _FIN, _RST = range(len(ROLES))


def assign_roles(group: np.ndarray, file_row: np.ndarray, direction_view: dict[str, np.ndarray]
                 ) -> np.ndarray:
    """Role code per packet; inputs are in direction order (`group`: connection * 2 +
    direction, ascending; time order within a group, `file_row` the packets' file positions).

    A packet's role depends on its own direction's packets before it, and, for the few that
    could be a zero-window probe or a duplicate ACK, on the peer's latest packet before it in
    the file: found by a binary search in the peer's run of packets.
    """
    view = direction_view
    group_first = np.searchsorted(group, np.arange(int(group[-1]) + 3)) if len(group) else group
    return _roles(group, file_row, group_first, view["flags"], view["payload_bytes"],
                  view["rel_seq"], view["rel_ack"], view["window_raw"], view["time_us"])


@numba.njit(cache=True, nogil=True)
def _latest_peer_packet(group, file_row, group_first, i):
    """Index of the peer's latest packet before packet i in the file, -1 where there is none."""
    peer = group[i] ^ 1
    low = group_first[peer]
    high = group_first[peer + 1]
    while low < high:
        middle = (low + high) // 2
        if file_row[middle] < file_row[i]:
            low = middle + 1
        else:
            high = middle
    return low - 1 if low > group_first[peer] else -1


@numba.njit(cache=True, nogil=True)
def _roles(group, file_row, group_first, flags, payload_bytes, rel_seq, rel_ack, window_raw,
           time_us):
    role = np.empty(len(group), np.uint8)
    max_end = NONE_YET
    latest_advance = 0
    for i in range(len(group)):
        has_previous = i > 0 and group[i] == group[i - 1]
        if not has_previous:
            max_end = NONE_YET
        flag = flags[i]
        payload = np.int64(payload_bytes[i])
        seq = rel_seq[i]
        window = np.int64(window_raw[i])
        fin_or_syn = (flag & (FLAG_FIN | FLAG_SYN)) != 0
        end = seq + payload + (1 if fin_or_syn else 0)
        carries_data = payload > 0
        keepalive = has_previous and payload <= 1 and seq == max_end - 1 and not fin_or_syn
        old_data = has_previous and seq < max_end and not keepalive
        same_ack = has_previous and rel_ack[i] == rel_ack[i - 1]
        same_window = has_previous and window == window_raw[i - 1]
        same_seq = has_previous and seq == rel_seq[i - 1]
        bare = not carries_data and (flag & (FLAG_SYN | FLAG_FIN | FLAG_RST)) == 0
        code = _DATA if carries_data else _PURE_ACK
        if bare and same_ack and same_seq and not same_window:
            code = _WINDOW_UPDATE
        if bare and same_ack and same_window and window != 0:
            peer = _latest_peer_packet(group, file_row, group_first, i)
            answers_keepalive = (peer >= 0 and payload_bytes[peer] <= 1
                                 and rel_ack[i] == rel_seq[peer] + 1
                                 and (flags[peer] & (FLAG_SYN | FLAG_FIN)) == 0)
            if not answers_keepalive:
                code = _DUP_ACK
        if payload == 1 and seq == max_end:
            peer = _latest_peer_packet(group, file_row, group_first, i)
            if peer >= 0 and window_raw[peer] == 0:
                code = _ZERO_WINDOW_PROBE
        if not carries_data and (flag & FLAG_FIN) != 0:
            code = _FIN
        if (flag & FLAG_SYN) != 0:
            code = _SYN
        if (carries_data or fin_or_syn) and old_data:
            code = _RETRANSMISSION
        if end > max_end:
            latest_advance = i
        if (carries_data and old_data and end != max_end
                and time_us[i] - time_us[latest_advance] < OUT_OF_ORDER_WINDOW_US):
            code = _OUT_OF_ORDER
        if keepalive:
            code = _KEEPALIVE
        if (flag & FLAG_RST) != 0:
            code = _RST
        role[i] = code
        max_end = max(max_end, end)
    return role
