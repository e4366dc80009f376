"""Order-preserving int64 keys: one ``all_reduce(MAX)`` picks the winning (value, id).

The high 32 bits hold the float32 value's bits mapped so that signed-integer
order equals float order; the low 32 bits hold ``2**32 - 1 - id`` so that, on
equal values, the smaller id has the larger key.  ``-0.0`` must share ``+0.0``'s
key and every NaN one key above ``+inf``, or the key order disagrees with argmax.
"""

from __future__ import annotations

import torch

_CANONICAL_NAN = 0x7FC00000


def encode_keys(
    values: torch.Tensor,
    ids: torch.Tensor,
    *,
    canonical_zero: bool = True,
    canonical_nan: bool = True,
    id_bits: int = 32,
) -> torch.Tensor:
    """Pack float values and int ids (< 2**id_bits) into int64 keys."""
    v = values.to(torch.float32)
    if canonical_zero:
        v = torch.where(v == 0, torch.zeros_like(v), v)
    bits = v.view(torch.int32).to(torch.int64)
    if canonical_nan:
        bits = torch.where(torch.isnan(v), torch.full_like(bits, _CANONICAL_NAN), bits)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    low = (1 << id_bits) - 1
    return (ordered << id_bits) | (low - ids.to(torch.int64))


def decode_ids(keys: torch.Tensor, id_bits: int = 32) -> torch.Tensor:
    low = (1 << id_bits) - 1
    return low - (keys & low)
