"""Connection columns are written as Python's round(value, 6) would write them, value by value
(the document skips `round` for values it would give back unchanged; checked against `round`
itself on any double and on the microsecond times a capture holds)."""

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from nagledetect.report.document import _json_values

microsecond_times = st.integers(min_value=-(2 ** 52), max_value=2 ** 52).map(lambda us: us / 1e6)


def _expected(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | microsecond_times, max_size=50))
def test_float_columns_match_round(values: list[float]) -> None:
    written = _json_values(np.array(values, dtype=np.float64))
    assert [repr(value) for value in written] == [repr(_expected(value)) for value in values]


def test_integer_columns_are_plain_ints() -> None:
    assert _json_values(np.array([3, -1, 2 ** 40], dtype=np.int64)) == [3, -1, 2 ** 40]
