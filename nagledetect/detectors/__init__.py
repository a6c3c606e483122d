"""Detectors, registered in one list: each is a module with `KIND` and
`detect(columns: DetectorInput) -> list[Finding]`, run in this order (later ones may read the
findings of earlier ones). Adding a detector: write its module, add it here, add its tests.
"""

from nagledetect.detectors import nagle_stall

CONNECTION_DETECTORS = (nagle_stall,)
