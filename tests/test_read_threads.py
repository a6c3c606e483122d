"""A small capture is read in the caller's thread; a large one is read ahead on a thread of its
own while the caller takes in the batch before. Either way the result is the same: the thread
only overlaps work, it never changes it."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

from nagledetect.analysis import analyze_capture
from nagledetect.read import capture
from nagledetect.read.capture import decoded_batches
from nagledetect.read.threads import InlineExecutor, ahead
from nagledetect.report.document import build_document, write_json
from tests.conftest import SAMPLE_TRACES

SEED003 = SAMPLE_TRACES / "seed003-nagle.pcap"
"""240 packets in 18 KB: far under `THREADED_MIN_BYTES`."""


def _thread_names_while_reading(path: str) -> set[str]:
    """The names of the threads alive while each decoded batch is taken in."""
    names: set[str] = set()
    _, batches = decoded_batches(path)
    for _ in batches:
        names |= {thread.name for thread in threading.enumerate()}
    return names


def test_a_small_capture_is_read_without_threads() -> None:
    assert not any(name.startswith("read") for name in _thread_names_while_reading(str(SEED003)))


def test_a_capture_over_the_threshold_is_read_ahead_on_a_thread(monkeypatch) -> None:
    monkeypatch.setattr(capture, "THREADED_MIN_BYTES", 0)
    assert "read_0" in _thread_names_while_reading(str(SEED003))


def test_inline_and_threaded_reads_give_the_same_batches(monkeypatch) -> None:
    """Batches of 16 packets, so the reading ahead is exercised over and over."""
    monkeypatch.setattr(capture, "BATCH_PACKETS", 16)
    read = {}
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(capture, "THREADED_MIN_BYTES", threshold)
        accounting, batches = decoded_batches(str(SEED003))
        read[threshold] = (list(batches), accounting)
    inline, threaded = read[1 << 40], read[0]
    assert len(inline[0]) > 10
    assert inline[1] == threaded[1]
    for (columns, sack), (other_columns, other_sack) in zip(inline[0], threaded[0], strict=True):
        for one, other in ((columns, other_columns), (sack, other_sack)):
            assert one.keys() == other.keys()
            assert all(np.array_equal(one[name], other[name]) for name in one)


@pytest.mark.parametrize("name", ["seed003-nagle.pcap", "mixed.pcap", "trap-rpc.pcap"])
def test_the_document_is_the_same_read_inline_or_on_threads(name, monkeypatch) -> None:
    """In parts of 4 KB (the analysis that reads through `decoded_batches`)."""
    def document() -> bytes:
        out = io.BytesIO()
        write_json(build_document([analyze_capture(str(SAMPLE_TRACES / name), part_bytes=4096)]),
                   out)
        return out.getvalue()

    inline = document()
    monkeypatch.setattr(capture, "THREADED_MIN_BYTES", 0)
    assert document() == inline


def test_an_inline_call_that_fails_raises_when_its_result_is_taken() -> None:
    """As a thread's future does: the caller meets the error where it takes the result."""
    future = InlineExecutor().submit(int, "not a number")
    assert future.done()
    with pytest.raises(ValueError, match="not a number"):
        future.result()


def test_a_stage_ahead_gives_its_items_in_order_made_on_its_own_thread() -> None:
    makers: list[str] = []

    def made(count: int):
        for number in range(count):
            makers.append(threading.current_thread().name)
            yield number

    assert list(ahead(made(50), "stage")) == list(range(50))
    assert set(makers) == {"stage_0"}


def test_a_stage_ahead_makes_the_next_item_while_the_caller_holds_one() -> None:
    """The caller, holding item 0, waits for the stage to start on item 1: without the stage
    ahead it would wait forever (here, 10 s, and the test fails)."""
    started = [threading.Event() for _ in range(3)]

    def made():
        for number, event in enumerate(started):
            event.set()
            yield number

    stage = ahead(made(), "stage")
    assert next(stage) == 0
    assert started[1].wait(timeout=10)
    assert list(stage) == [1, 2]


def test_a_stages_error_is_raised_where_its_item_is_taken() -> None:
    def made():
        yield 1
        yield 2
        raise ValueError("slice 3 is broken")

    taken = []
    with pytest.raises(ValueError, match="slice 3 is broken"):
        for item in ahead(ahead(made(), "first"), "second"):
            taken.append(item)
    assert taken == [1, 2]
