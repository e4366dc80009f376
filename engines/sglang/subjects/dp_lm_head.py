"""SGLang 0.5.23's DP-attention LM head (``--enable-dp-lm-head``): ``LogitsProcessor._gather_attn_tp_logits``, then
the greedy ``torch.argmax``.

With attention data parallelism and ``--enable-dp-lm-head``, the head is vocab-sharded over the attention-TP group,
whose ranks hold the same rows (their data-parallel group's requests).  Each rank computes its shard's logits and the
method gathers the columns back into ``[rows, config.vocab_size]``; the rows never leave their group, so each rank gets
its own rows back by construction (the suite's even layout: every rank, every row).  The method runs from the wheel's
file (:func:`engines.sglang.wheel.compiled.wheel_functions`: the method alone, NumPy's import left out, as it never
calls it) on a processor of no other state than ``vocab_size`` (the config's, unpadded: the head's base ids) and
``attn_tp_size`` (the group's size); its two gathers, ``attn_tp_all_gather_into_tensor`` and ``attn_tp_all_gather``
(into a list of tensors, as ``torch.distributed.all_gather``), are the suite's group's, and refuse tensors of other
sizes as torch's collectives do.  The rank's logits are the contract's
(:func:`sharded.local_argmax.checked_shard_logits`); the head pins no soft cap and scale 1 (SGLang scales before the
gather and caps after it, which elementwise changes nothing this subject is about), no added ids (the config's
vocabulary counts base ids) and no ``d2t``.  Nothing of SGLang is copied here.
"""

from __future__ import annotations

import types
from functools import cache

import torch

from engines.sglang.wheel import kernels
from engines.sglang.wheel.compiled import wheel_functions
from engines.sglang.wheel.runtime import RANK, Coordinator
from sharded.layout import ShardLayout
from sharded.local_argmax import checked_shard_logits

FILES = {"logits": "sglang/srt/layers/logits_processor.py"}
HEAD: dict[str, object] = {"soft_cap": None, "scale": 1.0, "added": 0, "logits_vocab": None, "d2t": "none"}
LAYOUTS_WHY = "the attention-TP group's ranks hold the same rows, and SGLang's ParallelLMHead cuts even shards"


def why_unavailable() -> str | None:
    """Why the method cannot run here, or None: the wheel alone (torch runs it, on any group)."""
    return kernels.wheel_missing(FILES)


def attn_tp_all_gather_into_tensor(out: torch.Tensor, tensor: torch.Tensor) -> None:
    """Every rank's ``tensor``, flat in rank order, into ``out`` (the attention-TP group's)."""
    Coordinator(RANK.get()).all_gather_into_tensor(out, tensor)


def attn_tp_all_gather(outputs: list[torch.Tensor], tensor: torch.Tensor) -> None:
    """Rank r's ``tensor`` into ``outputs[r]``, each the input's size."""
    stacked = RANK.get().all_gather(tensor.contiguous())
    for rank, out in enumerate(outputs):
        if out.shape != tensor.shape:
            raise RuntimeError(f"all_gather: output {rank} is {tuple(out.shape)}, the input {tuple(tensor.shape)}")
        out.copy_(stacked[rank])


@cache
def _method() -> types.FunctionType:
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    given = {"attn_tp_all_gather_into_tensor": attn_tp_all_gather_into_tensor, "attn_tp_all_gather": attn_tp_all_gather}
    path = kernels.kernel_paths(FILES)["logits"]
    module = wheel_functions("logits_processor", path, ("LogitsProcessor._gather_attn_tp_logits",), given, ("numpy",))
    return module.LogitsProcessor._gather_attn_tp_logits


def _logits(hidden, weight, bias, layout: ShardLayout, scale, soft_cap, d2t) -> torch.Tensor:
    if soft_cap is not None or scale != 1.0 or d2t is not None or layout.added_vocab:
        raise ValueError("SGLang's DP-attention head gather takes base ids' raw logits: no soft_cap, scale 1, no d2t")
    return checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)


def sglang_dp_lm_head_argmax(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``_gather_attn_tp_logits`` on the rank's logits, then ``torch.argmax`` (module docstring)."""
    logits = _logits(hidden, weight, bias, layout, scale, soft_cap, d2t)
    processor = types.SimpleNamespace(vocab_size=layout.org_vocab, attn_tp_size=group.world_size)
    token = RANK.set(group)
    try:
        return torch.argmax(_method()(processor, logits), dim=-1)
    finally:
        RANK.reset(token)


def sglang_dp_lm_head_argmax_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """The gather corrected (S5): every rank's shard whole, at its own (padded) width, then the padding columns
    dropped (the last ones: base ids are contiguous), then ``torch.argmax``."""
    logits = _logits(hidden, weight, bias, layout, scale, soft_cap, d2t)
    stacked = group.all_gather(logits.contiguous())  # [tp, rows, width]
    every = stacked.permute(1, 0, 2).reshape(logits.shape[0], -1)
    return torch.argmax(every[:, : layout.org_vocab], dim=-1)


for _fn in (sglang_dp_lm_head_argmax, sglang_dp_lm_head_argmax_corrected):
    _fn.head = HEAD
    _fn.needs = why_unavailable
    _fn.packages = (kernels.DIST,)
    _fn.layouts, _fn.layouts_why = ("diverged",), LAYOUTS_WHY
