"""vLLM's local argmax as its known causes describe it, each defect switchable: the baseline's mechanism check.

A build whose change corrected one cause still fails for the others, often under rules its release's page never
recorded (with V3 corrected, 0.32.0's misnumbered added ids run past ``d2t``'s end instead).  So a failure of the
layer's local path (``--impl vllm``) is the known causes' where this model, with some of them in place, fails the
same example the same way (``engines.vllm.releases.baseline``): a tie the build sends to the higher rank, which no cause
describes, stays new.

The model is the path the release's ``LogitsProcessor.get_top_tokens`` and ``LocalArgmaxMixin`` take, in the
project's terms: the shard's logits, soft cap before scale; the padding mask; each rank's ``max``; the
(value, id) pairs gathered and the first maximal value in rank order taken; then ``top + d2t[top]``.  Its defects,
as the causes state them (``engines/vllm/causes/logits.py``):

- V1: a column's id is its position plus the shard's first base id, and the mask blanks the shard's last
  ``num_org_vocab_padding`` columns, so added rows get ids of their position and the base padding stays live;
  corrected, only the shard's token rows compete, each with its own id.
- V3: ids at or past the logits vocabulary compete; corrected, they are blanked (by the ids the path gives).
- V4: at tp > 1 the ids travel as float32; corrected, exactly.

A model is named by the defects it keeps, ``engines.vllm.causes.known_defects:with_V1_V4`` (``with_none``: every cause
corrected), so a rank process loads it as any implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import torch

from sharded.local_argmax import checked_shard_logits

DEFECTS = ("V1", "V3", "V4")
MODELS = {("--impl", "vllm", ()): DEFECTS}  # the subjects a model stands for, with the defects it can keep


def _columns(layout, defects: frozenset[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """The columns that compete and the ids the path gives them."""
    columns = torch.arange(layout.size, device=device)
    if "V1" in defects:
        live = columns < layout.size - (layout.added_row - layout.base_real)  # the last num_pad columns blanked
        ids = columns + layout.start
    else:
        base, added = (
            columns < layout.base_real,
            (columns >= layout.added_row) & (columns < layout.added_row + layout.added_real),
        )
        live = base | added
        ids = torch.where(base, columns + layout.start, columns - layout.added_row + layout.added_start)
    if "V3" not in defects:
        live &= ids < layout.vocab
    return columns[live], ids[live]


def local_path(defects: frozenset[str]) -> Callable:
    """The release's local path with ``defects`` in place and the other causes corrected."""

    def impl(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
        logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
        columns, ids = _columns(layout, defects, logits.device)
        blanked = torch.full_like(logits, -torch.inf)
        blanked[:, columns] = logits[:, columns]
        values, index = blanked.max(dim=-1)
        position = torch.zeros(layout.size, dtype=torch.int64, device=logits.device)
        position[columns] = ids
        top = position[index] if columns.numel() else index + layout.start
        if layout.tp > 1:  # the pairs gathered, the first maximal value in rank order taken
            gathered = group.all_gather(torch.stack([values.float(), top.float()], dim=-1))  # [tp, B, 2]
            winner = gathered[..., 0].argmax(dim=0, keepdim=True)
            ids = gathered[..., 1] if "V4" in defects else group.all_gather(top)  # V4: the ids as float32
            top = ids.gather(0, winner).squeeze(0).to(torch.int64)
        return top if d2t is None else top + d2t[top]

    impl.__name__ = name(defects)
    return impl


def name(defects: frozenset[str]) -> str:
    return "with_" + ("_".join(sorted(defects)) or "none")


def subsets(defects: tuple[str, ...]) -> list[frozenset[str]]:
    """Every choice of the defects, fewest first: the first model that fails alike names the fewest causes."""
    return [frozenset(c) for n in range(len(defects) + 1) for c in combinations(defects, n)]


def __getattr__(attr: str) -> Callable:
    """``with_V1_V4`` and the like: the model keeping those defects."""
    if attr.startswith("with_"):
        kept = frozenset() if attr == "with_none" else frozenset(attr.removeprefix("with_").split("_"))
        if kept <= set(DEFECTS) and attr == name(kept):
            return local_path(kept)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
