"""SGLang 0.5.23's EAGLE greedy verify (``eagle_sample``, ``sglang/srt/speculative/eagle_utils.py``), judged for
agreement across ranks: how many drafts each rank accepts when the ranks' drafts differ.

``eagle_sample`` takes the target's logits gathered from the vocab-parallel head (the same on every rank), takes
their argmax, and walks the draft tree, accepting a draft while it equals the target's token.  The drafts are each
rank's own: a draft module that picks on each rank (a replicated head, DFlash2's selector, S6) can propose
different tokens on different ranks, and then the ranks accept different counts unless the verify's result is
broadcast.  ``eagle_sample`` broadcasts it from rank 0 on ROCm only (``if _is_hip:``, sgl-project/sglang #34238;
#31071 reported the hang on CUDA, its fix #31478 still open).

The subjects run ``eagle_sample`` from the wheel's file (:func:`engines.sglang.wheel.compiled.wheel_functions`: its
in-body SGLang imports left out, their names given) as a chain of one draft per request (``topk`` 1, two tokens a
request: the root and the draft):

* the target's logits: each rank's shard from its own copy of the hidden states, gathered, base ids in id order (as
  the classic path gathers them), for both of a request's positions;
* the draft: the argmax of the rank's own full logits, from its own copy and a replicated copy of the head (gathered
  once): **the project's model** of a draft that picks on each rank, not SGLang's draft code;
* the tree walk: ``verify_tree_greedy_func`` from ``spec_tree.py`` with its XPU branch, the wheel's Triton kernel
  ``verify_tree_greedy_kernel_triton`` (under Triton's interpreter on a CPU), in place of the CUDA JIT kernel, which
  walks the same tree;
* the platform: ``sglang_eagle_verify_greedy`` as on CUDA (``_is_cuda``), ``sglang_eagle_verify_greedy_rocm`` as on
  ROCm (``_is_hip``: the broadcast), the rank's group as SGLang's ``tp_group`` (``world_size``, ``broadcast``).

Each returns, per request (a row of the case), the drafts it accepted (``accept_lens - 1``, int64): judged by
``test_ranks_agree`` alone (``fn.judged_only``), as the tokens are not the classic path's.  The head pins
:mod:`engines.sglang.subjects.dflash_draft`'s (float32, integer weights, the bias one more feature).  Nothing of SGLang
is copied here.
"""

from __future__ import annotations

import types
from functools import cache

import torch

from engines.sglang.subjects.dflash_draft import _check, _with_bias, judged_for_agreement, replicated_head
from engines.sglang.wheel import kernels
from engines.sglang.wheel.compiled import wheel_functions
from engines.sglang.wheel.runtime import RANK, _Parallel
from sharded.layout import ShardLayout

FILES = {"eagle": "sglang/srt/speculative/eagle_utils.py", "tree": "sglang/kernels/ops/speculative/spec_tree.py"}
KEEP = ("eagle_sample", "_verify_uses_greedy", "_can_use_sparse_uno_tree_target_sampling")
TREE = ("verify_tree_greedy_func", "verify_tree_greedy_triton", "verify_tree_greedy_kernel_triton")
PLATFORMS = {"cuda": dict(_is_cuda=True, _is_hip=False), "rocm": dict(_is_cuda=False, _is_hip=True)}
JUDGED_WHY = (
    "the verify returns how many drafts each request accepted, not tokens of the classic path: only whether the "
    "ranks agree is judged"
)


def why_unavailable() -> str | None:
    """Why the verify cannot run here (no wheel, no Triton or neither CUDA nor its interpreter), or None."""
    return kernels.why_unavailable(FILES)


@cache
def _verify(platform: str) -> types.FunctionType:
    """``eagle_sample`` with the platform's flags and the XPU tree walk (module docstring)."""
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    paths = kernels.kernel_paths(FILES)
    flags = dict(_is_cuda=False, _is_hip=False, _is_musa=False, _is_cpu=False, _is_npu=False, _is_xpu=True)
    tree = wheel_functions(f"spec_tree_{platform}", paths["tree"], TREE, flags)
    given = {
        **PLATFORMS[platform],
        "_is_xpu": False,
        "_is_cpu": False,
        "verify_tree_greedy_func": tree.verify_tree_greedy_func,
        "get_spec": lambda: types.SimpleNamespace(speculative_use_rejection_sampling=False),
        "get_parallel": _Parallel,
        "is_dp_attention_enabled": lambda: False,
        "sanitize_nan_logits": lambda logits, where: None,  # SGLANG_SANITIZE_NAN_LOGITS is off by default
        "SIMULATE_ACC_LEN": -1,  # SGLANG_SIMULATE_ACC_LEN's default: off
        "SIMULATE_ACC_TOKEN_MODE": "fixed",
    }
    return wheel_functions(f"eagle_utils_{platform}", paths["eagle"], KEEP, given).eagle_sample


def _accepted(platform: str, hidden, weight, bias, layout: ShardLayout, scale, soft_cap, d2t, group) -> torch.Tensor:
    _check(hidden, weight, layout, soft_cap, scale, d2t)
    if layout.added_vocab:
        raise ValueError("this EAGLE verify's head is the target's base vocabulary: no added ids")
    hidden, weight = _with_bias(hidden, weight, bias)
    rows = hidden.shape[0]
    head = replicated_head(weight, layout, group)
    shards = group.all_gather((hidden @ weight.T).contiguous())  # each rank's shard from its own copy
    target = torch.cat(list(shards.unbind(0)), dim=-1)[:, : layout.vocab]
    draft = torch.argmax(hidden @ head.T, dim=-1)  # the rank's own pick (the project's model of a draft)
    candidates = torch.stack([torch.zeros_like(draft), draft], dim=1)  # [requests, 2]: root, draft
    chain = torch.arange(2 * rows, dtype=torch.long).view(rows, 2)
    verify_input = types.SimpleNamespace(
        draft_token=candidates.flatten(),
        draft_token_num=2,
        max_tree_depth=2,
        retrieve_index=chain,
        retrieve_next_token=torch.tensor([[1, -1]]).expand(rows, 2).contiguous(),
        retrieve_next_sibling=torch.full((rows, 2), -1, dtype=torch.long),
        tree_topk=1,
    )
    sampling = types.SimpleNamespace(
        is_all_greedy=True, acc_additive_penalties=None, acc_scaling_penalties=None, logit_bias=None
    )
    batch = types.SimpleNamespace(
        device=hidden.device,
        forward_mode=types.SimpleNamespace(is_idle=lambda: False),
        seq_lens=[1] * rows,
        sampling_info=sampling,
    )
    logits_output = types.SimpleNamespace(next_token_logits=target.repeat_interleave(2, dim=0).contiguous())
    token = RANK.set(group)
    try:
        _, accept_lens, _ = _verify(platform)(verify_input, batch, logits_output)
    finally:
        RANK.reset(token)
    return (accept_lens - 1).long()


def sglang_eagle_verify_greedy(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``eagle_sample``'s greedy branch as on CUDA: no broadcast (module docstring)."""
    return _accepted("cuda", hidden, weight, bias, layout, scale, soft_cap, d2t, group)


def sglang_eagle_verify_greedy_rocm(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """``eagle_sample``'s greedy branch as on ROCm: rank 0's result broadcast (module docstring)."""
    return _accepted("rocm", hidden, weight, bias, layout, scale, soft_cap, d2t, group)


judged_for_agreement(
    (sglang_eagle_verify_greedy, sglang_eagle_verify_greedy_rocm),
    why_unavailable,
    "SGLang's ParallelLMHead cuts even shards and the verify takes every row",
    JUDGED_WHY,
)
