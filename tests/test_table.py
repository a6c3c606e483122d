"""The analysis's tables (`nagledetect.table`): columns by name, rows by position, coded columns,
and the way to and from pandas; and that the text and JSON paths never import pandas or plotly
(importing pandas took a small capture longer than analysing it)."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from nagledetect.api import load_capture, read_capture
from nagledetect.table import Table, as_frame, as_table, concatenated
from tests.conftest import SAMPLE_TRACES, modules_a_run_imports

SEED003 = str(SAMPLE_TRACES / "seed003-nagle.pcap")


def _roles() -> Table:
    return Table({"frame": np.array([3, 1, 2]), "role": np.array([1, 0, 1], dtype=np.int8)},
                 coded={"role": ("data", "pure_ack")})


def test_rows_are_taken_by_position_mask_or_slice_and_columns_are_shared() -> None:
    table = _roles()
    assert table.take(np.array([2, 0]))["frame"].tolist() == [2, 3]
    assert table.take(table["frame"] > 1)["frame"].tolist() == [3, 2]
    sliced = table.take(slice(1, 3))
    assert sliced["frame"].tolist() == [1, 2] and np.shares_memory(sliced["frame"],
                                                                    table["frame"])
    assert table.select(["role"]).columns == ["role"]
    assert table.without(["role"]).columns == ["frame"]
    assert table.assign(size=[10, 20, 30]).columns == ["frame", "role", "size"]
    assert table.columns == ["frame", "role"]


def test_coded_columns_read_as_codes_and_records_give_their_words() -> None:
    table = _roles()
    assert table["role"].tolist() == [1, 0, 1]
    assert table.labels("role").tolist() == ["pure_ack", "data", "pure_ack"]
    assert table.records()[0] == {"frame": 3, "role": "pure_ack"}
    assert type(table.records()[0]["frame"]) is int


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        Table({"a": [1, 2], "b": [1]})
    table = _roles()
    with pytest.raises(ValueError, match="2 rows, the table 3"):
        table["more"] = [1, 2]


def test_text_is_held_as_python_strings_as_pandas_holds_it() -> None:
    table = Table({"address": ["10.0.0.1", "10.0.0.2"]})
    assert table["address"].dtype == object
    assert Table({"address": []})["address"].dtype == object


def test_concatenated_tables_keep_their_codes() -> None:
    joined = concatenated([_roles(), _roles().take(slice(0, 1))])
    assert joined["frame"].tolist() == [3, 1, 2, 3]
    assert joined.coded == {"role": ("data", "pure_ack")}
    assert len(concatenated([])) == 0


def test_a_table_pickles_and_compares_by_value() -> None:
    table = _roles().assign(rate=[0.5, np.nan, 1.0])
    again = pickle.loads(pickle.dumps(table))
    assert again.equals(table)
    assert not again.equals(table.assign(rate=[0.5, 0.0, 1.0]))


def test_load_capture_gives_the_same_tables_as_pandas_frames() -> None:
    """seed003-nagle.pcap, 234 packets and one connection (tshark -z conv,tcp): the public
    DataFrames hold the same values as the analysis's tables, the role as a categorical."""
    frames = load_capture(SEED003)
    tables = read_capture(SEED003)
    assert isinstance(frames.packets, pd.DataFrame) and isinstance(tables.packets, Table)
    assert len(frames.packets) == len(tables.packets) == 234
    assert len(frames.connections) == 1
    assert isinstance(frames.packets["role"].dtype, pd.CategoricalDtype)
    assert frames.packets["role"].astype(str).tolist() == tables.packets.labels("role").tolist()
    assert as_table(frames.packets).equals(tables.packets)
    pd.testing.assert_frame_equal(as_frame(tables.connections), frames.connections)


@pytest.mark.parametrize("arguments", [[SEED003], ["--format", "json", SEED003],
                                       ["check", SEED003]])
def test_the_text_and_json_paths_import_neither_pandas_nor_plotly(arguments: list[str]) -> None:
    imported, printed = modules_a_run_imports(arguments, ("pandas", "plotly"))
    assert imported == []
    assert "seed003" in printed or "nagle" in printed
