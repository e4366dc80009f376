"""A pure-Python argmax and top-k over Python floats: the semantics the torch code must keep.

Used only on small rows to cross-check torch: the first maximum wins, NaN is
the maximum (the first NaN wins), and ``-0.0 == +0.0`` is a tie.
"""

from __future__ import annotations

from collections.abc import Sequence


def py_argmax(values: Sequence[float]) -> int:
    if not values:
        raise ValueError("argmax of an empty row")
    best = 0
    for i, v in enumerate(values):
        if v != v:
            return i
        if v > values[best]:
            best = i
    return best


def py_top_k(values: Sequence[float], k: int) -> list[int]:
    """The top-k indices written the obvious way: NaNs first, then larger values, ties by the smaller index."""
    if not 1 <= k <= len(values):
        raise ValueError(f"k={k} is outside 1..{len(values)}")
    return sorted(range(len(values)), key=lambda i: (0, 0.0, i) if values[i] != values[i] else (1, -values[i], i))[:k]
