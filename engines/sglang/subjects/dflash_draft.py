"""SGLang 0.5.23's DFlash draft samplers: the greedy proposals over the target's vocab-parallel LM head.

A DFlash draft has no head of its own; it borrows the target's ``lm_head`` (``sglang/srt/speculative/
dflash_worker_v2.py``), and its greedy proposals are an argmax over that head's shards, the local path of this
project's contract.  Two samplers run here, from the installed wheel's file (:func:`engines.sglang.wheel.compiled.
wheel_functions`: parsed, the named class and method kept, run without importing ``sglang``):

* ``sglang_dflash_draft_graph``: ``_DflashDraftSampler``, the sampler captured in the draft's CUDA graph.  Per rank
  ``torch.max`` over the base rows of its shard, the column plus the shard's first id, two
  ``all_gather_into_tensor`` calls (values in the head's dtype, ids int64), ``argmax`` over ranks (the lowest rank
  on equal values), the id gathered.  Its builder never takes a head with added vocabulary (it falls back to
  eager), so the head here has none.  It reads hidden states in blocks and drops each block's first row (the
  bonus token's): each row here follows an anchor row of zeros, in blocks of two.
* ``sglang_dflash_draft_eager``: ``DFlashWorkerV2._greedy_sample_from_vocab_parallel_head``, the eager fallback, in
  chunks of 256 rows, with added vocabulary (a rank's added maximum replaces its base maximum only when strictly
  larger).  The method runs on a worker of no other state than its nine ``_draft_greedy_*`` buffers, as the worker's
  ``__init__`` sets them; ``get_parallel().tp_group`` is the rank's group, ``is_dense_head_weight`` the wheel's
  dtype test restated (a dense fp32/bf16/fp16 weight), and ``lm_head`` carries the shard's indices as vLLM's
  layout gives them (``shard_indices``: base rows, padded base rows, added rows, first base id, first added id).
* ``sglang_domino_first_ids``: ``_domino_tp_first_ids`` (``sglang/srt/speculative/domino_utils.py``), Domino's pick of
  a block's first token at tp > 1: the same table of per-shard ``torch.max`` pairs over the base rows of the rank's
  local logits.  It takes logits, not a head, so the contract's logits (``sharded.local_argmax.checked_shard_logits``:
  bias, cap and scale as rule 1 says) go in as they are, in any dtype; Domino computes its own with no cap or scale,
  so the head pins none, nor added ids (it reads base rows only) or ``d2t``.

What the adapter adds (and why it is the head's, not SGLang's): SGLang multiplies the hidden states by the shard
with no bias, cap or scale.  The suite plants NaN and infinities through the bias, so a bias enters as one more
feature (a column of ones beside the hidden states, the bias beside the weight): with the integer weights and the
float32 head the head pins, every product and sum is exact, so the logits are the contract's bit for bit (measured on
562 drawn float32 heads, and 328 float16 ones; in bfloat16, 9 of 371 differed from ``F.linear`` in a zero's sign or a
subnormal, CPU matmuls rounding the bias's product apart, so bfloat16 is left out).  The head pins no soft cap,
scale 1, every base id a token and no ``d2t`` (the draft borrows the target's head; SGLang maps no draft ids here).
SGLang's group is the rank's: ``world_size``, ``rank_in_group`` and ``all_gather_into_tensor`` (every rank's tensor,
flat in rank order) over the suite's ``all_gather``.  Nothing of SGLang is copied here.
"""

from __future__ import annotations

import types
from functools import cache

import torch

from engines.sglang.wheel import kernels
from engines.sglang.wheel.compiled import wheel_functions
from engines.sglang.wheel.runtime import RANK, Coordinator, _dense_head_weight, _Parallel
from sharded.group import TPGroup
from sharded.layout import ShardLayout
from sharded.local_argmax import checked_shard_logits

FILES = {"worker": "sglang/srt/speculative/dflash_worker_v2.py", "domino": "sglang/srt/speculative/domino_utils.py"}
KEEP = ("_DflashDraftSampler", "DFlashWorkerV2._greedy_sample_from_vocab_parallel_head")
HEAD: dict[str, object] = {
    "dtype": "float32",
    "weights": "int",
    "soft_cap": None,
    "scale": 1.0,
    "logits_vocab": None,
    "d2t": "none",
}
GRAPH_HEAD = {**HEAD, "added": 0}
DOMINO_HEAD: dict[str, object] = {"soft_cap": None, "scale": 1.0, "added": 0, "logits_vocab": None, "d2t": "none"}
EAGER_CHUNK = 256  # the method's default chunk_size, as the worker calls it
LAYOUTS_WHY = "SGLang's ParallelLMHead cuts the vocabulary into even shards, and these samplers take every row"


def why_unavailable() -> str | None:
    """Why the samplers cannot run here (no wheel, another version, the file missing), or None: torch alone runs
    them, on any group, the simulated one included."""
    return kernels.wheel_missing(FILES)


@cache
def _loaded(file: str) -> types.ModuleType:
    """The wheel's ``file`` (a key of :data:`FILES`) with what the subjects keep of it."""
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    path = kernels.kernel_paths(FILES)[file]
    if file == "domino":  # imports torch alone
        return wheel_functions("domino", path, ("_domino_tp_first_ids",), {})
    given = {
        "get_parallel": _Parallel,
        "is_dense_head_weight": _dense_head_weight,
    }
    return wheel_functions("dflash_draft", path, KEEP, given)


def _with_bias(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """The bias as one more feature: ``[hidden | 1]`` against ``[weight | bias]`` (module docstring)."""
    if bias is None:
        return hidden, weight
    ones = hidden.new_ones(hidden.shape[0], 1)
    return torch.cat([hidden, ones], dim=1), torch.cat([weight, bias.unsqueeze(1)], dim=1)


def replicated_head(weight: torch.Tensor, layout: ShardLayout, group: TPGroup) -> torch.Tensor:
    """The head's base rows in id order, on every rank: a replicated module's copy of it (every shard, gathered;
    base ids are contiguous, padding after them)."""
    return torch.cat(list(group.all_gather(weight.contiguous()).unbind(0)))[: layout.vocab]


def judged_for_agreement(fns, needs, layouts_why: str, judged_why: str) -> None:
    """What a subject judged by ``test_ranks_agree`` alone declares: the graph sampler's head, the wheel, the
    layout of ranks whose copies differ (``fn.judged_only``: docs/contract.md)."""
    for fn in fns:
        fn.head, fn.needs, fn.packages = GRAPH_HEAD, needs, (kernels.DIST,)
        fn.layouts, fn.layouts_why = ("diverged",), layouts_why
        fn.judged_only, fn.judged_why = ("test_ranks_agree",), judged_why


def _check(hidden, weight, layout: ShardLayout, soft_cap, scale, d2t) -> None:
    if soft_cap is not None or scale != 1.0 or d2t is not None or layout.vocab != layout.org_vocab + layout.added_vocab:
        raise ValueError(
            "SGLang's DFlash draft samplers take the head's raw logits over every id: no soft_cap, scale 1, no d2t"
        )
    if weight.shape[0] != layout.size or weight.shape[1] != hidden.shape[1] or weight.dtype != hidden.dtype:
        raise ValueError(f"shape or dtype mismatch: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}")


def sglang_dflash_draft_graph(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``_DflashDraftSampler`` (module docstring): each row after an anchor row it drops."""
    _check(hidden, weight, layout, soft_cap, scale, d2t)
    if layout.added_vocab:
        raise ValueError("SGLang's DFlash graph sampler takes no added vocabulary (its builder falls back to eager)")
    hidden, weight = _with_bias(hidden, weight, bias)
    rows = hidden.shape[0]
    sampler = _loaded("worker")._DflashDraftSampler(
        weight=weight,
        block_size=2,
        num_org=layout.num_real,
        org_vocab_start=layout.start,
        max_bs=rows,
        tp_group=Coordinator(group) if group.world_size > 1 else None,
    )
    sampler(torch.stack([torch.zeros_like(hidden), hidden], dim=1).reshape(2 * rows, -1))
    return sampler.out[:rows].clone()


def sglang_dflash_draft_eager(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``DFlashWorkerV2._greedy_sample_from_vocab_parallel_head`` (module docstring)."""
    _check(hidden, weight, layout, soft_cap, scale, d2t)
    hidden, weight = _with_bias(hidden, weight, bias)
    worker = _loaded("worker").DFlashWorkerV2()
    for name in ("gathered_max", "gathered_ids", "local_max", "local_arg", "best_rank", "rank_index", "selected_ids"):
        setattr(worker, f"_draft_greedy_{name}_buf", None)
    worker._draft_greedy_gather_cap = worker._draft_greedy_local_cap = worker._draft_greedy_index_cap = 0
    shard = types.SimpleNamespace(
        num_org_elements=layout.num_real,
        num_org_elements_padded=layout.added_row,
        num_added_elements=layout.num_added,
        org_vocab_start_index=layout.start,
        added_vocab_start_index=layout.added_start,
    )
    lm_head = types.SimpleNamespace(weight=weight, shard_indices=shard)
    token = RANK.set(group)
    try:
        return worker._greedy_sample_from_vocab_parallel_head(
            hidden_states=hidden, lm_head=lm_head, chunk_size=EAGER_CHUNK
        )
    finally:
        RANK.reset(token)


def sglang_domino_first_ids(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``_domino_tp_first_ids`` on the rank's logits (module docstring)."""
    _check(hidden, weight, layout, soft_cap, scale, d2t)
    if layout.added_vocab:
        raise ValueError("SGLang's Domino pick reads base rows only: no added vocabulary")
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    pick = _loaded("domino")._domino_tp_first_ids
    return pick(logits, org_vocab_start=layout.start, num_org=layout.num_real, tp_group=Coordinator(group))


sglang_dflash_draft_graph.head = GRAPH_HEAD
sglang_dflash_draft_eager.head = HEAD
sglang_domino_first_ids.head = DOMINO_HEAD
for _fn in (sglang_dflash_draft_graph, sglang_dflash_draft_eager, sglang_domino_first_ids):
    _fn.needs = why_unavailable
    _fn.packages = (kernels.DIST,)
    _fn.layouts, _fn.layouts_why = ("diverged",), LAYOUTS_WHY
