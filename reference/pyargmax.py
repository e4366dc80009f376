"""A pure-Python argmax over Python floats: the semantics torch.argmax must keep.

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
