"""A catalogue of other engines' local-argmax variants, written from the facts in the spec (not their code).

Each variant differs from the built-ins only where the spec's facts about that engine say it does; it
validates its input like the built-ins, so that the suite's findings are the facts' consequences alone.

- ``trtllm_style`` (TensorRT-LLM's EAGLE3 draft sampler): the id is ``local index + rank * rows per rank``,
  (id, value) travel as float32 pairs through an all-gather, the maximal value wins (the lowest rank on
  ties), and no row is masked: padding and ids beyond the logits vocabulary compete.  Its branches for the
  layouts of spec section 13, each the project's model of a documented behaviour, not TensorRT-LLM's code: on
  uneven shards the offset stays ``rank * its own width`` (#18836's review); under attention data parallel with
  the head vocab-parallel (``dp_rows``) every rank's rows are gathered first, and each rank keeps its own segment.
- ``sglang_style`` (SGLang's open proposals): (value, id) packed into one int64 key with a 24-bit id
  field, ties to the smallest global id, one ``all_reduce(MAX)``; a head of 2**24 ids or more is refused.
"""

from __future__ import annotations

import torch

from sharded.dp_rows import through_every_row
from sharded.keys import decode_ids, encode_keys
from sharded.layout import ShardLayout
from sharded.local_argmax import checked_shard_logits, local_best, map_d2t

PACKED_ID_BITS = 24


def trtllm_style(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group, dp_rows=None):
    """Ids from the rank offset, float32 (id, value) pairs, no padding mask; under attention data parallel, the
    rows gathered first and each rank's own segment kept."""
    if dp_rows is not None:
        kwargs = {"scale": scale, "soft_cap": soft_cap, "d2t": d2t}
        return through_every_row(trtllm_style, hidden, dp_rows, group, weight, bias, layout, **kwargs)
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    values, local = logits.max(dim=-1)  # every row of the shard competes
    pairs = torch.stack([(local + layout.rank * layout.size).float(), values.float()], dim=-1)
    gathered = group.all_gather(pairs)  # [tp, B, 2]
    winner = gathered[..., 1].argmax(dim=0)  # torch.argmax: the first (lowest) rank on ties
    return map_d2t(gathered[..., 0].gather(0, winner.unsqueeze(0)).squeeze(0).long(), d2t, layout)


def sglang_style(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """One packed key per row with a 24-bit id; heads of 2**24 ids or more are refused."""
    if layout.padded_vocab >= 1 << PACKED_ID_BITS:
        raise ValueError(f"a head of {layout.padded_vocab} ids: the packed key holds ids below 2**24")
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    keys = encode_keys(*local_best(logits, layout), id_bits=PACKED_ID_BITS)
    return map_d2t(decode_ids(group.all_reduce(keys, op="max"), PACKED_ID_BITS), d2t, layout)
