"""The numbers of the pcapng block format (the IETF draft "PCAP Now Generic"), for the writer of
annotated copies (`report/annotate.py`); the compiled core reads pcapng files itself."""

from __future__ import annotations

import struct

SECTION_HEADER = 0x0A0D0D0A
BYTE_ORDERS = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
"""The section header's byte-order magic 0x1A2B3C4D as each order writes it."""
INTERFACE_DESCRIPTION = 1
OBSOLETE_PACKET = 2
SIMPLE_PACKET = 3
ENHANCED_PACKET = 6
SMALLEST_BLOCK_BYTES = 12
OPTION_END = 0
OPTION_TIME_RESOLUTION = 9
BLOCK_HEADS = {order: struct.Struct(order + "II") for order in BYTE_ORDERS.values()}
"""A block's type and total length, in each byte order."""
