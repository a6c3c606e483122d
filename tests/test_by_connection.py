"""Connection columns looked up per packet or segment give the same values whether the table's
ids are its row numbers (read by position) or not (looked up by id).

Checked on a real capture's connection table against pandas' own lookup by id.
"""

from __future__ import annotations

import numpy as np
import pytest

from nagledetect.api import load_capture
from nagledetect.flows.connections import by_connection
from tests.conftest import SAMPLE_TRACES


def test_by_position_and_by_id_agree() -> None:
    capture = load_capture(str(SAMPLE_TRACES / "mixed.pcap"))
    table = capture.connections
    wanted = capture.packets["connection"].to_numpy()
    shuffled = table.sample(frac=1.0, random_state=7)
    assert not (shuffled["id"].to_numpy() == np.arange(len(table))).all()
    for column in ("rtt_ms", "server_address", "effective_mss"):
        expected = table.set_index("id")[column].reindex(wanted).to_numpy()
        for lookup in (table, shuffled):
            got = by_connection(lookup, column, wanted)
            assert [str(v) for v in got] == [str(v) for v in expected]


def test_an_id_not_in_the_table_is_an_error_not_another_rows_value() -> None:
    """mixed.pcap has 6 connections (tshark -z conv,tcp): ids 0 to 5; asking for id 6 or -1,
    of the table in id order (read by position) or shuffled (looked up by id), must not read
    some other connection's row."""
    table = load_capture(str(SAMPLE_TRACES / "mixed.pcap")).connections
    shuffled = table.sample(frac=1.0, random_state=7)
    assert len(table) == 6
    for lookup in (table, shuffled):
        for wanted in ([2, 6], [-1]):
            with pytest.raises(KeyError):
                by_connection(lookup, "rtt_ms", np.array(wanted))
