"""Vectorised walk over TCP options (MSS, window scale, SACK-permitted, SACK, timestamps).

Options are type-length-value records, so each packet's walk is a loop; the loop runs once per
option position (at most 40 bytes of options) over all packets at once, not once per packet.
"""

from __future__ import annotations

import numpy as np

from nagledetect.read.layout import (
    TCP_MSS_OPTION,
    TCP_NOP_NOP_TIMESTAMP,
    TCP_OPTION,
    TCP_SACK_BLOCK,
    TCP_TIMESTAMP_OPTION,
    TCP_WINDOW_SCALE_OPTION,
)

MAX_OPTION_BYTES = 40
MAX_SACK_BLOCKS = 4
OPTION_END = 0
OPTION_NOP = 1
OPTION_MSS = 2
OPTION_WINDOW_SCALE = 3
OPTION_SACK_PERMITTED = 4
OPTION_SACK = 5
OPTION_TIMESTAMP = 8
NO_WINDOW_SCALE = -1
NOP_NOP_TIMESTAMP_BYTES = 12
NOP_NOP_TIMESTAMP_LAYOUT = 0x0101080A


def _empty_columns(count: int) -> dict[str, np.ndarray]:
    return {
        "opt_mss": np.zeros(count, dtype=np.uint16),
        "opt_window_scale": np.full(count, NO_WINDOW_SCALE, dtype=np.int8),
        "opt_sack_permitted": np.zeros(count, dtype=bool),
        "opt_has_timestamp": np.zeros(count, dtype=bool),
        "opt_timestamp_value": np.zeros(count, dtype=np.uint32),
        "opt_timestamp_echo": np.zeros(count, dtype=np.uint32),
        "opt_sack_block_count": np.zeros(count, dtype=np.uint8),
    }


def decode_tcp_options(
    buf: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Options of each packet between `start` and `end` (end already clipped to the capture).

    Returns per-packet option columns and a side table of SACK blocks (row = packet position in
    the batch's kept packets, raw left and right edges), since few packets carry SACK blocks.
    """
    columns = _empty_columns(len(start))
    walking = _timestamp_fast_path(buf, start, end, columns)
    sack_rows: list[np.ndarray] = []
    sack_left: list[np.ndarray] = []
    sack_right: list[np.ndarray] = []
    position = start.astype(np.int64)
    for _ in range(MAX_OPTION_BYTES):
        if len(walking) == 0:
            break
        here = position[walking]
        option = TCP_OPTION.gather(buf, here)
        kind = option["kind"]
        length = np.where(kind == OPTION_NOP, 1, option["length"].astype(np.int64))
        well_formed = (kind == OPTION_NOP) | ((length >= 2) & (here + length <= end[walking]))
        record = well_formed & (kind != OPTION_END)
        _record_values(buf, columns, walking[record], here[record], kind[record], length[record])
        rows, left, right = _sack_blocks(buf, walking[record], here[record], kind[record],
                                         length[record])
        sack_rows.append(rows)
        sack_left.append(left)
        sack_right.append(right)
        position[walking] = here + length
        walking = walking[record & (position[walking] < end[walking])]
    sack = {
        "row": np.concatenate(sack_rows) if sack_rows else np.zeros(0, np.int64),
        "left_raw": np.concatenate(sack_left) if sack_left else np.zeros(0, np.uint32),
        "right_raw": np.concatenate(sack_right) if sack_right else np.zeros(0, np.uint32),
    }
    np.add.at(columns["opt_sack_block_count"], sack["row"], 1)
    return columns, sack


def _timestamp_fast_path(buf: np.ndarray, start: np.ndarray, end: np.ndarray,
                         columns: dict[str, np.ndarray]) -> np.ndarray:
    """Decode the layout nearly every established Linux/BSD segment carries (NOP, NOP, timestamp:
    12 bytes) in one gather; returns the packets whose options still need the general walk."""
    candidates = np.flatnonzero(end - start == NOP_NOP_TIMESTAMP_BYTES)
    if len(candidates):
        fields = TCP_NOP_NOP_TIMESTAMP.gather(buf, start[candidates])
        match = fields["layout"] == NOP_NOP_TIMESTAMP_LAYOUT
        rows = candidates[match]
        columns["opt_has_timestamp"][rows] = True
        columns["opt_timestamp_value"][rows] = fields["value"][match]
        columns["opt_timestamp_echo"][rows] = fields["echo"][match]
        done = np.zeros(len(start), dtype=bool)
        done[rows] = True
        return np.flatnonzero(~done & (start < end))
    return np.flatnonzero(start < end)


def _record_values(buf, columns, rows, here, kind, length) -> None:
    """Store the value of each MSS, window-scale, SACK-permitted and timestamp option found."""
    mss = (kind == OPTION_MSS) & (length == 4)
    if mss.any():
        columns["opt_mss"][rows[mss]] = TCP_MSS_OPTION.gather(buf, here[mss])["mss"]
    scale = (kind == OPTION_WINDOW_SCALE) & (length == 3)
    if scale.any():
        columns["opt_window_scale"][rows[scale]] = TCP_WINDOW_SCALE_OPTION.gather(
            buf, here[scale])["shift"].astype(np.int8)
    columns["opt_sack_permitted"][rows[(kind == OPTION_SACK_PERMITTED) & (length == 2)]] = True
    stamp = (kind == OPTION_TIMESTAMP) & (length == 10)
    if stamp.any():
        columns["opt_has_timestamp"][rows[stamp]] = True
        timestamps = TCP_TIMESTAMP_OPTION.gather(buf, here[stamp])
        columns["opt_timestamp_value"][rows[stamp]] = timestamps["value"]
        columns["opt_timestamp_echo"][rows[stamp]] = timestamps["echo"]


def _sack_blocks(buf, rows, here, kind, length):
    """Left and right edges of every SACK block (up to four per option)."""
    sack = (kind == OPTION_SACK) & (length >= 10) & ((length - 2) % 8 == 0)
    block_count = np.where(sack, np.minimum((length - 2) // 8, MAX_SACK_BLOCKS), 0)
    found_rows, found_left, found_right = [], [], []
    for block in range(MAX_SACK_BLOCKS):
        has_block = block_count > block
        if not has_block.any():
            break
        block_start = here[has_block] + 2 + 8 * block
        edges = TCP_SACK_BLOCK.gather(buf, block_start)
        found_rows.append(rows[has_block])
        found_left.append(edges["left"])
        found_right.append(edges["right"])
    if not found_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.uint32)
    return np.concatenate(found_rows), np.concatenate(found_left), np.concatenate(found_right)
