"""What every vllm-ascend subject runs first: the rank's logits as ``AscendLogitsProcessor._get_logits_normal`` cuts
them under ``enable_reduce_sample``, and the sampler's file (``sample/sampler.py``), both run from the sdist."""

from __future__ import annotations

import types
from functools import cache

import torch

from engines.ascend.wheel.source import functions
from sharded.layout import ShardLayout
from sharded.local_argmax import checked_shard_logits

LAYOUTS_WHY = "vllm-ascend's ParallelLMHead cuts the vocabulary into even shards, as vLLM's does"


@cache
def logits_module() -> types.ModuleType:
    return functions("logits", ("AscendLogitsProcessor._get_logits_normal",), AscendParallelLMHead=object)


def rank_logits(hidden, weight, bias, layout: ShardLayout, scale, soft_cap) -> torch.Tensor:
    """This rank's logits as ``_get_logits_normal`` keeps them under the switch, run from the sdist: the head's
    ``quant_method.apply`` gives the contract's shard logits, ``num_org_embeddings_per_partition`` is the layout's
    ``base_real`` (vLLM's ``org_vocab_end_index - org_vocab_start_index``)."""
    logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
    method = types.SimpleNamespace(apply=lambda layer, x, bias=None: logits)
    head = types.SimpleNamespace(quant_method=method, num_org_embeddings_per_partition=layout.base_real)
    processor = types.SimpleNamespace(_apply_head=_apply_head)  # newer checkouts call it; 0.23.0.post1 inlines it
    return logits_module().AscendLogitsProcessor._get_logits_normal(processor, hidden, head, None)


def _apply_head(lm_head, hidden_states: torch.Tensor, embedding_bias: torch.Tensor | None) -> torch.Tensor:
    """vLLM's ``LogitsProcessor._apply_head``: the head's ``quant_method.apply``."""
    return lm_head.quant_method.apply(lm_head, hidden_states, bias=embedding_bias)


@cache
def sampler_module() -> types.ModuleType:
    keep = ("AscendSampler.greedy_sample", "_apply_top_k_top_p_pytorch", "_apply_top_k_top_p_torch_npu")
    return functions("sampler", keep)
