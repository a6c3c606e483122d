"""The capture handed back to Wireshark: pcapng with a packet comment on every evidence frame.

Why: a network engineer checks a finding in the tool they already use. Each evidence frame of
each finding gets one opt_comment (option 1 of its packet block) per role it plays, worded as the
text report words the evidence, so `frame.comment contains "nagle"` lists them. One comment per
role rather than one joined comment: each names one finding and one stall, reads whole in
Wireshark's "Packet comments" tree, and a filter on a kind matches exactly the frames of that
kind's evidence.

The packets are copied as records, never decoded again: a pcapng file's blocks as they lie (its
sections, interfaces and their options, in each section's byte order), a packet block that gets
comments rebuilt with them among its options; a pcap file's records as enhanced packet blocks of
one interface with the file's link type, snapshot length and timestamp resolution. Frame N of the
output is frame N of the input, unless only the frames of some connections are kept. The text
comes from the document's findings and their evidence rows: nothing is analysed here.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from nagledetect import __version__
from nagledetect.analysis import Analysis
from nagledetect.detectors import kinds
from nagledetect.detectors.model import StallEvents
from nagledetect.errors import InputError
from nagledetect.read.compressed import DecompressedCopy, file_compression
from nagledetect.read.pcapng import (
    BLOCK_HEADS,
    BYTE_ORDERS,
    ENHANCED_PACKET,
    INTERFACE_DESCRIPTION,
    OBSOLETE_PACKET,
    OPTION_END,
    OPTION_TIME_RESOLUTION,
    SECTION_HEADER,
    SIMPLE_PACKET,
    SMALLEST_BLOCK_BYTES,
)
from nagledetect.report.document import shown_ids
from nagledetect.report.evidence_words import ack_note, reaction_text
from nagledetect.report.headline import duration_text
from nagledetect.sent_tables import rows_table

OPTION_COMMENT = 1
OPTION_USER_APPLICATION = 4
"""shb_userappl: the application that wrote the section (a pcap file's output only)."""
OPTION_FCS_LENGTH = 13
"""if_fcslen: bytes of frame check sequence at the end of each packet."""
LARGEST_OPTION_BYTES = 0xFFFF
PACKET_HEADER_BYTES = 28
"""An enhanced (or obsolete) packet block's type, length and fields before its packet data."""
CAPTURED_LENGTH_AT = 20
UNLIMITED_SECTION = -1
"""A section header's section length when it does not say (how every common writer writes it)."""
SECTION_LENGTH_AT = 16
PCAP_HEADER_FIELDS = "IHHiIII"
"""A pcap file header: magic, version (major, minor), time zone, accuracy, snapshot length and
link type field."""
PCAP_HEADER_BYTES = 24
PCAP_RECORD_BYTES = 16
PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": ("<", 6), b"\x4d\x3c\xb2\xa1": ("<", 9),
               b"\xa1\xb2\xc3\xd4": (">", 6), b"\xa1\xb2\x3c\x4d": (">", 9)}
"""A pcap file's magic as each byte order writes it, with its timestamp resolution (10^-n s)."""
PCAP_LINKTYPE_MASK = 0xFFFF
PCAP_FCS_PRESENT = 1 << 26
PCAP_FCS_WORDS_SHIFT = 28
"""A pcap header's link type field: the link type in its low 16 bits, and, when bit 26 is set,
the frame check sequence's length in 16-bit words in its top 4 bits."""
OUTPUT_BYTE_ORDER = "<"
ENHANCED_PACKET_HEAD = struct.Struct(OUTPUT_BYTE_ORDER + "7I")
"""An enhanced packet block's type, length, interface, timestamp (high, low word), captured
and wire lengths."""
BLOCK_TAIL = struct.Struct(OUTPUT_BYTE_ORDER + "I")
OPTIONS_END = struct.pack(OUTPUT_BYTE_ORDER + "HH", OPTION_END, 0)
WRITE_BUFFER_BYTES = 1 << 20
NAGLE_HOLDS = (kinds.NAGLE_DELACK_STALL, kinds.STREAM_COALESCING)
"""Kinds whose evidence is a segment held until a delayed ACK released it."""
ANNOTATED_MODE = 0o644


class Role:
    """What an evidence frame is to its stall: the three frames of a stall (last data, the ACK
    that ended the wait, the data it released), or the two ends of a gap (when the frame that
    ended the wait is the next data itself)."""

    LAST_DATA = 0
    ACK = 1
    RELEASED = 2
    GAP_START = 3
    GAP_END = 4


# --- the comments -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FindingEvidence:
    """What a comment names of a finding: its kind, connection and evidence rows."""

    kind: str
    connection: int
    events: Sequence[dict[str, Any]]


class FrameComments:
    """Every evidence frame's comments, made when the frame is written. The frames of every
    role of every finding's evidence are held as columns, in frame order (within a frame: in the
    document's order of findings, then stall, then role), so a capture's millions of stalls are
    not millions of strings at once."""

    def __init__(self, findings: Sequence[dict[str, Any]]) -> None:
        self._findings: list[_FindingEvidence] = []
        self.connections: set[int] = set()
        """Every connection with a finding (with evidence or not), as the document shows it."""
        pieces = [piece for finding in findings for piece in self._evidence_of(finding)]
        columns = ([np.concatenate(column) for column in zip(*pieces)] if pieces
                   else [np.zeros(0, dtype=np.int64)] * 4)
        order = np.lexsort(columns[::-1])
        self._frame, self._owner, self._event, self._role = (column[order] for column in columns)
        self.frames = np.unique(self._frame)
        """Every evidence frame, ascending."""

    def _evidence_of(self, finding: dict[str, Any]) -> Iterator[tuple[np.ndarray, ...]]:
        """The finding's evidence as columns, a role at a time: frame, finding, stall, role."""
        self.connections.add(finding["connection"])
        rows = finding["events"]
        if not len(rows):
            return
        owner = len(self._findings)
        self._findings.append(_FindingEvidence(finding["kind"], finding["connection"], rows))
        for role, role_frames in _role_frames(rows):
            stalls = np.flatnonzero(role_frames > 0)
            yield (role_frames[stalls], np.full(len(stalls), owner, dtype=np.int64), stalls,
                   np.full(len(stalls), role, dtype=np.int64))

    def __len__(self) -> int:
        """How many comments there are, over all frames."""
        return len(self._frame)

    def at(self, frame: int) -> list[str]:
        """The comments of a frame (none when it is no finding's evidence)."""
        low, high = np.searchsorted(self._frame, [frame, frame + 1]).tolist()
        return [self._text(owner, event, role) for owner, event, role in
                zip(self._owner[low:high].tolist(), self._event[low:high].tolist(),
                    self._role[low:high].tolist())]

    def _text(self, owner: int, event: int, role: int) -> str:
        finding = self._findings[owner]
        row = finding.events[event:event + 1][0]
        where = f"{finding.kind} {event + 1}/{len(finding.events)} on connection {finding.connection}"
        return f"{where}: {_role_words(finding.kind, row, role)}"


def _role_frames(rows: Sequence[dict[str, Any]]) -> Iterator[tuple[int, np.ndarray]]:
    """Each role's frame in every stall of a finding (0 where a stall has no frame in that
    role): a gap's wait ended by the next data itself has two roles, a stall's three."""
    if isinstance(rows, StallEvents):
        last, ack, released = (np.asarray(column, dtype=np.int64) for column in (
            rows.last_data_frame, rows.ack_frame, rows.released_frame))
    else:
        last, ack, released = (np.array([row[key] for row in rows], dtype=np.int64) for key in (
            "last_data_frame", "delayed_ack_frame", "released_frame"))
    gap = ack == released
    yield Role.LAST_DATA, np.where(gap, 0, last)
    yield Role.ACK, np.where(gap, 0, ack)
    yield Role.RELEASED, np.where(gap, 0, released)
    yield Role.GAP_START, np.where(gap, last, 0)
    yield Role.GAP_END, np.where(gap, released, 0)


def _role_words(kind: str, row: dict[str, Any], role: int) -> str:
    """A frame's part in one stall, in the text report's words (its ACK notes and reaction)."""
    last, ack, released = row["last_data_frame"], row["delayed_ack_frame"], row["released_frame"]
    stall = duration_text(row["stall_s"])
    if role == Role.GAP_START:
        return f"last data before a gap of {stall}; the next data in frame {released}"
    if role == Role.GAP_END:
        return f"next data after a gap of {stall} since the last data in frame {last}"
    note = ack_note(kind, row)
    ack_name = "delayed ACK" if kind in NAGLE_HOLDS else "ACK"
    reaction = (f" (+{reaction_text(row['reaction_ms'])})" if row.get("reaction_ms") is not None
                else "")
    if role == Role.LAST_DATA:
        return (f"last data before the stall; the {ack_name} in frame {ack}{note} released the "
                f"next data in frame {released}{reaction}: stall {stall}")
    if role == Role.ACK:
        return (f"{ack_name}{note} of the data up to frame {last}; it released the next data "
                f"in frame {released}{reaction}: stall {stall}")
    held = "held segment" if kind in kinds.NAGLE_FAMILY else "next data"
    when = (f"{reaction_text(row['reaction_ms'])} after" if row.get("reaction_ms") is not None
            else "by")
    return (f"{held}, released {when} the {ack_name} in frame {ack}{note}; stall {stall} since "
            f"the last data in frame {last}")


# --- the blocks ---------------------------------------------------------------------------------


def _padded(data: bytes | memoryview) -> bytes:
    return bytes(data) + b"\0" * (-len(data) % 4)


def _option(code: int, value: bytes, order: str) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + _padded(value)


def _comment_options(comments: list[str], order: str) -> bytes:
    """opt_comment options, one a comment (UTF-8, cut to what an option holds)."""
    return b"".join(_option(OPTION_COMMENT, text.encode()[:LARGEST_OPTION_BYTES], order)
                    for text in comments)


def _block(block_type: int, body: bytes, order: str) -> bytes:
    """A block around `body` (padded to 32 bits already): its type, and its total length
    before and after it."""
    length = 12 + len(body)
    return struct.pack(order + "II", block_type, length) + body + struct.pack(order + "I", length)


def _options_end(block: memoryview, start: int, order: str) -> int:
    """Where a block's options end before its end-of-options option (or where the last whole
    option ends, when they run past the block: what follows is no option)."""
    position, end = start, len(block) - 4
    while position + 4 <= end:
        code, length = struct.unpack_from(order + "HH", block, position)
        following = position + 4 + (length + 3) // 4 * 4
        if code == OPTION_END or following > end:
            break
        position = following
    return position


def _commented_packet_block(block: memoryview, comments: list[str], order: str) -> bytes:
    """An enhanced or obsolete packet block with the comments after its own options."""
    block_type, = struct.unpack_from(order + "I", block, 0)
    captured, = struct.unpack_from(order + "I", block, CAPTURED_LENGTH_AT)
    options_at = PACKET_HEADER_BYTES + (captured + 3) // 4 * 4
    kept = _options_end(block, options_at, order)
    body = (bytes(block[8:kept]) + _comment_options(comments, order)
            + struct.pack(order + "HH", OPTION_END, 0))
    return _block(block_type, body, order)


# --- the writing --------------------------------------------------------------------------------


@dataclass
class Annotated:
    """What was written: frames, comments, and what could not be done."""

    frames: int = 0
    comments: int = 0
    commented_frames: int = 0
    warnings: list[str] = field(default_factory=list)


class _Output:
    """The output stream, with what was written counted."""

    def __init__(self, stream: BinaryIO, comments: FrameComments, kept: np.ndarray | None
                 ) -> None:
        self.stream = stream
        self.comments = comments
        self.done = Annotated()
        self._commented = _frame_mask(comments.frames)
        self._kept = kept
        self.frames_read = 0
        """Frames of the input read (written or not)."""
        self.uncommented: list[int] = []
        """Evidence frames whose block cannot hold a comment (simple packet blocks)."""

    def keeps(self, frame: int) -> bool:
        return self._kept is None or frame < len(self._kept) and bool(self._kept[frame])

    def comments_of(self, frame: int) -> list[str]:
        if frame >= len(self._commented) or not self._commented[frame]:
            return []
        comments = self.comments.at(frame)
        self.done.comments += len(comments)
        self.done.commented_frames += 1
        return comments


def _frame_mask(frames: np.ndarray) -> np.ndarray:
    """A mask by frame number of these frames."""
    mask = np.zeros(int(frames.max()) + 1 if len(frames) else 0, dtype=bool)
    mask[frames] = True
    return mask


def write_annotated(capture: str, out_path: Path, comments: FrameComments,
                    kept_frames: np.ndarray | None = None) -> Annotated:
    """Write the capture at `capture` (pcap or pcapng, compressed or not) to `out_path` as
    pcapng with the comments; with `kept_frames` (frame numbers), only those frames and every
    evidence frame. Written to a temporary file in the same folder, then renamed: never a
    half-written capture. Raises InputError for a file that is neither format, OSError for
    what the system refuses."""
    kept = None if kept_frames is None else _frame_mask(np.union1d(kept_frames, comments.frames))
    compression = file_compression(capture)
    copy = DecompressedCopy(capture, compression) if compression else None
    try:
        with tempfile.NamedTemporaryFile("wb", dir=out_path.parent, suffix=".tmp",
                                         delete=False, buffering=WRITE_BUFFER_BYTES) as handle:
            try:
                output = _Output(handle, comments, kept)
                _copy_capture(capture, copy.path if copy else capture, output)
                if copy and copy.cut_short:
                    output.done.warnings.append(f"{copy.cut_short}: its frames up to there "
                                                "were written")
            except BaseException:
                handle.close()
                os.unlink(handle.name)
                raise
        os.chmod(handle.name, ANNOTATED_MODE)
        os.replace(handle.name, out_path)
    finally:
        if copy:
            copy.remove()
    _say_missing(output, comments)
    return output.done


def _say_missing(output: _Output, comments: FrameComments) -> None:
    """Warnings for what is missing: every frame (only the connections with findings kept, and
    none has one), or an evidence frame's comment (past the end of what was read, or in a
    block that holds none)."""
    if output.frames_read and not output.done.frames:
        output.done.warnings.append("no connection has a finding: it holds no frame")
    beyond = int(np.count_nonzero(comments.frames > output.frames_read))
    if beyond:
        output.done.warnings.append(f"{beyond} evidence frames lie past the last frame read; "
                                    "they have no comment")
    if output.uncommented:
        output.done.warnings.append(
            f"{len(output.uncommented)} evidence frames (the first, frame "
            f"{output.uncommented[0]}) are simple packet blocks, which hold no comment")


def _copy_capture(capture: str, source: str, output: _Output) -> None:
    with open(source, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            raise InputError(f"{capture}: empty file, not a capture")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                magic = bytes(view[:4])
                if magic == struct.pack("<I", SECTION_HEADER):
                    _copy_pcapng(view, output)
                elif magic in PCAP_MAGICS:
                    _copy_pcap(view, output)
                else:
                    raise InputError(f"{capture}: not a pcap or pcapng capture")
            finally:
                view.release()


def _copy_pcapng(view: memoryview, output: _Output) -> None:
    """Every block as it lies, runs of unchanged blocks copied at once; a packet block that
    gets comments rebuilt with them, one not kept left out. A section header that states its
    section's length states none once its blocks change size."""
    size = len(view)
    position = copied_from = 0
    order = OUTPUT_BYTE_ORDER

    def flush(upto: int) -> None:
        output.stream.write(view[copied_from:upto])

    while position + SMALLEST_BLOCK_BYTES <= size:
        if struct.unpack_from("<I", view, position)[0] == SECTION_HEADER:
            order = BYTE_ORDERS.get(bytes(view[position + 8:position + 12]), "")
            if not order:
                output.done.warnings.append(f"the section header at byte {position} has no "
                                            "byte-order magic: the capture was written up to it")
                break
        block_type, length = BLOCK_HEADS[order].unpack_from(view, position)
        if length < SMALLEST_BLOCK_BYTES or length % 4 or position + length > size:
            output.done.warnings.append(f"damaged or cut block at byte {position}: the capture "
                                        "was written up to it")
            break
        replaced = _replacement(view[position:position + length], block_type, order, output)
        if replaced is not None:
            flush(position)
            output.stream.write(replaced)
            copied_from = position + length
        position += length
    else:
        if position < size:
            output.done.warnings.append(f"the {size - position} bytes after the last whole "
                                        "block were left out")
    flush(position)


def _replacement(block: memoryview, block_type: int, order: str, output: _Output
                 ) -> bytes | None:
    """What a block is written as: None for the block as it lies, empty for a packet not kept,
    or the block rebuilt (a packet block with its comments, a section header that no longer
    states a length it would get wrong). Packet blocks are counted as frames, as Wireshark
    numbers them."""
    if block_type == SECTION_HEADER:
        return _unlimited_section(block, order)
    if block_type not in (ENHANCED_PACKET, OBSOLETE_PACKET, SIMPLE_PACKET):
        return None
    output.frames_read += 1
    frame = output.frames_read
    if not output.keeps(frame):
        return b""
    output.done.frames += 1
    comments = output.comments_of(frame)
    if not comments:
        return None
    if block_type == SIMPLE_PACKET:
        output.uncommented.append(frame)
        return None
    return _commented_packet_block(block, comments, order)


def _unlimited_section(block: memoryview, order: str) -> bytes | None:
    """The section header with an unstated section length, when it states one (None: it does
    not, and is copied as it is)."""
    stated, = struct.unpack_from(order + "q", block, SECTION_LENGTH_AT)
    if stated == UNLIMITED_SECTION:
        return None
    changed = bytearray(block)
    struct.pack_into(order + "q", changed, SECTION_LENGTH_AT, UNLIMITED_SECTION)
    return bytes(changed)


def _copy_pcap(view: memoryview, output: _Output) -> None:
    """A section of one interface (the file's link type and snapshot length, its timestamp
    resolution) and an enhanced packet block per record, its timestamp the record's seconds
    and fraction as ticks of that resolution: exact. A record cut short ends the copy, as it
    ends libpcap's reading."""
    order, resolution = PCAP_MAGICS[bytes(view[:4])]
    if len(view) < PCAP_HEADER_BYTES:
        output.done.warnings.append("the pcap file header is cut short: no frame was written")
        return
    _, _, _, _, _, snaplen, linktype = struct.unpack_from(order + PCAP_HEADER_FIELDS, view, 0)
    output.stream.write(_pcap_section(snaplen, linktype, resolution))
    record = struct.Struct(order + "IIII")
    ticks_per_s = 10 ** resolution
    size = len(view)
    position = PCAP_HEADER_BYTES
    frame = 0
    while position + PCAP_RECORD_BYTES <= size:
        seconds, fraction, captured, wire = record.unpack_from(view, position)
        data_at = position + PCAP_RECORD_BYTES
        if data_at + captured > size:
            output.done.warnings.append(f"the record of frame {frame + 1} is cut short: the "
                                        "capture was written up to it")
            break
        frame += 1
        position = data_at + captured
        if not output.keeps(frame):
            continue
        _write_enhanced_packet(output, seconds * ticks_per_s + fraction, wire,
                               view[data_at:position], output.comments_of(frame))
        output.done.frames += 1
    else:
        if position < size:
            output.done.warnings.append(f"the record header after frame {frame} is cut "
                                        "short: the capture was written up to it")
    output.frames_read = frame


def _write_enhanced_packet(output: _Output, ticks: int, wire_bytes: int, data: memoryview,
                           comments: list[str]) -> None:
    """An enhanced packet block of interface 0, written in pieces (no copy of the packet)."""
    options = (_comment_options(comments, OUTPUT_BYTE_ORDER) + OPTIONS_END if comments
               else b"")
    padding = -len(data) % 4
    length = ENHANCED_PACKET_HEAD.size + len(data) + padding + len(options) + 4
    write = output.stream.write
    write(ENHANCED_PACKET_HEAD.pack(ENHANCED_PACKET, length, 0, ticks >> 32, ticks & 0xFFFFFFFF,
                                    len(data), wire_bytes))
    write(data)
    write(b"\0" * padding + options + BLOCK_TAIL.pack(length))


def _pcap_section(snaplen: int, linktype_field: int, resolution: int) -> bytes:
    """The section header and the one interface of a pcap file's copy: if_tsresol for a
    resolution other than pcapng's default (microseconds), if_fcslen when the file says its
    packets end in a frame check sequence."""
    order = OUTPUT_BYTE_ORDER
    application = f"nagledetect {__version__} (--annotate)".encode()
    section = _block(SECTION_HEADER, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0,
                                                 UNLIMITED_SECTION)
                     + _option(OPTION_USER_APPLICATION, application, order)
                     + OPTIONS_END, order)
    options = b""
    if resolution != 6:
        options += _option(OPTION_TIME_RESOLUTION, bytes([resolution]), order)
    if linktype_field & PCAP_FCS_PRESENT:
        fcs_bytes = (linktype_field >> PCAP_FCS_WORDS_SHIFT) * 2
        options += _option(OPTION_FCS_LENGTH, bytes([fcs_bytes]), order)
    if options:
        options += OPTIONS_END
    interface = _block(INTERFACE_DESCRIPTION,
                       struct.pack(order + "HHI", linktype_field & PCAP_LINKTYPE_MASK, 0, snaplen)
                       + options, order)
    return section + interface


def connection_frames(analysis: Analysis, shown_connections: set[int]) -> np.ndarray:
    """The frames of these connections (as the document shows them), from the analysis's
    packet table (kept when tables are wanted: in memory, or part by part on disk)."""
    connections = rows_table(analysis.capture.connections)
    wanted = np.asarray(connections["id"])[np.isin(shown_ids(connections),
                                                   list(shown_connections))]
    chunks = (analysis.part_tables.packets() if analysis.part_tables is not None
              else [analysis.capture.packets])
    frames = []
    for chunk in chunks:
        packets = rows_table(chunk)
        frames.append(np.asarray(packets["frame"])[np.isin(np.asarray(packets["connection"]),
                                                           wanted)])
    return np.concatenate(frames).astype(np.int64) if frames else np.zeros(0, dtype=np.int64)
