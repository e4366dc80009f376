"""vLLM's vocab-parallel layout: which padded ids each TP rank owns.

The real vocabulary of ``vocab`` ids is padded to a multiple of ``pad_to``
(vLLM's ``DEFAULT_VOCAB_PADDING_SIZE`` is 64) and split into ``tp`` equal,
contiguous shards.  All padding therefore sits at the end, on the last rank(s),
and a rank may hold padding only.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PAD_TO = 64


@dataclass(frozen=True)
class ShardLayout:
    """What one rank owns: padded ids ``[start, start + num_real + num_padding)``."""

    vocab: int
    padded_vocab: int
    tp: int
    rank: int
    start: int
    num_real: int
    num_padding: int

    @property
    def size(self) -> int:
        return self.num_real + self.num_padding

    @property
    def end(self) -> int:
        return self.start + self.size


def vocab_parallel_layout(vocab: int, tp: int, pad_to: int = DEFAULT_PAD_TO) -> tuple[ShardLayout, ...]:
    """Return one :class:`ShardLayout` per rank, in rank order."""
    for name, value in (("vocab", vocab), ("tp", tp), ("pad_to", pad_to)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    padded = -(-vocab // pad_to) * pad_to
    if padded % tp:
        raise ValueError(
            f"tp={tp} does not divide the padded vocabulary {padded} (vocab {vocab} padded to a multiple of {pad_to})"
        )
    per_rank = padded // tp
    layouts = []
    for rank in range(tp):
        start = rank * per_rank
        num_real = max(0, min(start + per_rank, vocab) - start)
        layouts.append(ShardLayout(vocab, padded, tp, rank, start, num_real, per_rank - num_real))
    return tuple(layouts)
