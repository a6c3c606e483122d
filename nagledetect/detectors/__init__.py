"""Detectors, registered in one list: each is a module with `KIND` and
`detect(columns: DetectorInput) -> list[Finding]`, run in this order (later ones may read the
findings of earlier ones: stalls skip streams already named coalescing; parity, stop-and-wait
and the other-gap causes read the stalls). Adding a detector: write its module, add it here,
add its tests. Host-wide analyses (delayed-ACK fingerprint, phase locking) run around this list
in `nagledetect.analysis`.
"""

from nagledetect.detectors import (
    nagle_stall,
    other_stalls,
    segment_parity,
    stop_and_wait,
    stream_coalescing,
    tinygram_flood,
)

CONNECTION_DETECTORS = (
    stream_coalescing,
    nagle_stall,
    segment_parity,
    tinygram_flood,
    stop_and_wait,
    other_stalls,
)
