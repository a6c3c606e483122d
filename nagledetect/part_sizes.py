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
of capture: 3.8 measured on records of 88 bytes (seed003's, replicated), 2.4 on the mix of real
traffic, 0.8 on one bulk connection; about 5 at the smallest records, 70 bytes, and more with
the packet table that charts and `--tables` keep. A capture whose whole analysis fits in the
parts' memory is analysed whole: in one pass, it is faster than in parts and takes less memory
than their workers do (docs/performance.md)."""
MAX_PARTS = 400
"""Two open files per part: stay well inside the usual limit of 1,024 (parts grow instead)."""
StageCallback = Callable[[str, int, int], None]
"""Told how a stage after the read gets on: its name, the units done, the units in all."""
