"""When a capture is analysed whole and when in parts, how large its parts are, and what the
parts analysed at once may take (`parts`): read without importing the parts' machinery, which
only a capture analysed in parts needs."""

from collections.abc import Callable

PART_BYTES = 32 * 1024 * 1024
"""Capture bytes per part: about 300,000 packets at a snaplen of 128, about 80 MB of work."""
WORK_PER_PART_FILE_BYTE = 4
"""A part's work takes about this many times its file's size in memory (BYTES_PER_PART_PACKET
against the file's 61 bytes a packet of IPv4, 85 of IPv6)."""
PART_FILE_BYTES_IN_FLIGHT = 6 * PART_BYTES
"""Part files analysed at once by default."""
PARTS_MEMORY_BYTES = PART_FILE_BYTES_IN_FLIGHT * WORK_PER_PART_FILE_BYTE
"""What the parts analysed at once may take by default (`--memory`): about 800 MB."""
WHOLE_MEMORY_PER_CAPTURE_BYTE = 6
"""The whole analysis by the compiled core takes up to about this many bytes of memory a byte
of capture: 3.7 measured on records of 88 bytes (seed003's, replicated), 1.7 on the mix of real
traffic, 0.8 on one bulk connection; more with the packet table that charts and `--tables`
keep. Not a bound: connections of two packets each (a scan answered by RSTs, 70-byte records)
take about 17, their state about 2 KB a connection. A capture whose whole analysis fits in the
parts' memory is analysed whole: in one pass, it is faster than in parts and takes less memory
than their workers do (docs/performance.md)."""
BYTES_PER_EVENT_ROW = 1_000
"""What a batch's analysis takes a row of the core's event tables (gaps, messages, bursts,
stall candidates, answered segments, payload counts), in a capture analysed a batch of finished
connections at a time (`streamed`): its columns as numpy arrays, about 150 bytes, and the
detectors' work on them."""
BYTES_PER_LIVE_PACKET = 200
"""What the core's pass holds a packet of a live connection: its 40-byte row, its share of the
segments' context (40 bytes a data segment) and of the gaps, and the allocator's slack
(`s1m_1k`, 1,000 connections live to the end: 270 MB for 1 M packets in the pass). Half of
`--memory` goes to the live connections, in `streamed` and in `live`'s view."""
BYTES_PER_LIVE_TABLE_ROW = 65
"""What a live connection's packet takes more where the pass keeps the packet table (for
`--tables`): its row, the sum of the table's column widths."""
MAX_PARTS = 400
"""Two open files per part: stay well inside the usual limit of 1,024 (parts grow instead)."""
StageCallback = Callable[[str, int, int], None]
"""Told how a stage after the read gets on: its name, the units done, the units in all."""


def no_stages(name: str, done: int, total: int) -> None:
    """Where nobody is told how the stages get on."""
