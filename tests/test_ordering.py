"""Name order by numpy equals Python's and pandas' orders (checked against them directly)."""

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from nagledetect.ordering import factorize_in_name_order, name_order

names = st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=12)
                 | st.sampled_from(["10.0.0.1", "10.0.0.10", "10.0.0.2", "[fe80::1]:80", "fe80::1"]),
                 max_size=60)


@given(names)
def test_name_order_is_pythons_stable_sort(values: list[str]) -> None:
    expected = sorted(range(len(values)), key=lambda position: values[position])
    assert name_order(values).tolist() == expected


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=8),
                max_size=60))
def test_factorize_in_name_order_is_pandas_sorted_factorize(values: list[str]) -> None:
    codes, distinct = factorize_in_name_order(values)
    expected_codes, expected_distinct = pd.factorize(np.array(values, dtype=object), sort=True)
    assert codes.tolist() == expected_codes.tolist()
    assert list(distinct) == list(expected_distinct)


def test_addresses_that_share_a_prefix() -> None:
    """A shorter address sorts before a longer one it begins (as Python orders strings)."""
    codes, distinct = factorize_in_name_order(["10.1.1.10", "10.1.1.1", "10.1.1.10", "10.1.1.2"])
    assert list(distinct) == ["10.1.1.1", "10.1.1.10", "10.1.1.2"]
    assert codes.tolist() == [1, 0, 1, 2]
