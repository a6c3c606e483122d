"""Strings in name order, sorted by numpy as fixed-width text.

Why: host addresses and endpoint names are put in name order in several places (hosts in
address order, findings by sender); sorting a million Python strings compares them one pair at
a time in Python (1.4 s), while numpy sorts them as fixed-width text in a third of that, in the
same order (by code point, as Python orders `str`; numpy drops trailing NUL characters, which
no address or endpoint name has).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def name_order(values: Sequence[str] | np.ndarray) -> np.ndarray:
    """The positions of `values` in name order (ties in their given order)."""
    return np.argsort(as_text(values), kind="stable")


def as_text(values: Sequence[str] | np.ndarray) -> np.ndarray:
    """Fixed-width text, which sorts (and `np.unique` orders) in name order: a byte a
    character when all are ASCII (addresses and names are; a quarter of the memory), else
    UTF-32. Also what forked workers should read rather than Python strings, whose reference
    counts they would write, copying the parent's pages."""
    try:
        return np.asarray(values, dtype="S")
    except UnicodeEncodeError:
        return np.asarray(values, dtype=str)


def as_strings(held: np.ndarray) -> np.ndarray:
    """Text made by `as_text` back as Python strings, a column of objects (as a table holds
    text); any other column as it is."""
    return held.astype(str).astype(object) if held.dtype.kind in "SU" else held


def factorize_in_name_order(values: Sequence[str] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's code into the distinct values, which are numbered in name order (what
    pandas' `factorize(sort=True)` gives for strings), and those values as text. None is named
    "None", as text has it. Only the distinct values are sorted (a million findings' few
    kinds took 70 MB sorted whole)."""
    codes, distinct = codes_by_first_use(values)
    names, rank = np.unique(as_text(distinct), return_inverse=True)
    return rank.astype(np.int64).reshape(-1)[codes], names.astype(str)


def codes_by_first_use(values: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Each value's code, the distinct values numbered in the order they first come, and those
    values: each value hashed once into a dict, nothing sorted."""
    if isinstance(values, np.ndarray):
        values = values.tolist()
    code_of: dict[Any, int] = {}
    codes = np.fromiter((code_of.setdefault(value, len(code_of)) for value in values),
                        dtype=np.int64, count=len(values))
    return codes, list(code_of)


def looked_up_as(values: str | Sequence[str], held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`values` as text of `held`'s kind, to be looked up in it (a sorted `as_text` array),
    and `held` itself; both as UTF-32 where a value has a character that `held`'s bytes
    cannot hold (then it is not there, and the lookup says so rather than failing)."""
    try:
        return np.asarray(values, dtype=held.dtype.kind), held
    except UnicodeEncodeError:
        return np.asarray(values, dtype=str), held.astype(str)
