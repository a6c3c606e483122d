"""Cases from docs/validation.md: real traffic where the stall test once went wrong.

Both files have ACKs that acknowledge data the capture never saw (read with tshark: frame 105 of
tcp__reassembly.pcap acknowledges 31406 while the last segment seen ends at 29958); timing
built on them proves nothing, so no stall may be reported there. The BDAT trace is a real
write-write-read (10-byte `BDAT 129`, then the chunk after a 40 ms delayed ACK, frames 16-18).
"""

from __future__ import annotations

import pytest

from nagledetect import load_capture
from nagledetect.analysis import run_detectors
from tests.conftest import corpus_file


def _stalls(relative: str):
    analysis = run_detectors(load_capture(str(corpus_file(relative))))
    return [f for f in analysis.findings if f.kind == "nagle-delack-stall"]


@pytest.mark.parametrize("relative", ["zeek/tcp__reassembly.pcap", "zeek/ftp__bigtransfer.pcap"])
def test_acks_covering_unseen_data_are_not_stalls(relative: str) -> None:
    assert not [f for f in _stalls(relative) if f.sender and f.sender.endswith((":2564", ":37150"))]


def test_bdat_header_then_chunk_is_a_stall_with_its_frames() -> None:
    stalls = _stalls("zeek/smtp__rfc3030-bdat-multipart-chunked.pcap")
    assert len(stalls) == 1 and stalls[0].sender == "127.0.0.1:38718"
    first = stalls[0].events
    assert (first.last_data_frame[0], first.ack_frame[0], first.released_frame[0]) == (16, 17, 18)
