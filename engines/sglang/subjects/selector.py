"""SGLang 0.5.23's DFlash2 selector: the greedy walk of a DFlash2 draft's proposals, judged for agreement across ranks.

A DFlash2 draft proposes through a ``CandidateSelector`` (``sglang/srt/models/dflash.py``): ``candidate_topk`` takes
the top K candidates over the target's vocab-parallel head (each rank's top K, gathered, a global top K: the same on
every rank), ``build_lattice`` scores them, ``unary[c] + <A[pred] * project(h), B[c]>``, with codebooks replicated on
every rank and ``h`` the rank's own draft hidden states, and ``sample_path`` walks the lattice (greedy rows: the
argmax, on the CPU in torch).  Nothing broadcasts the walk's proposals (sgl-project/sglang #40246, open, adds that),
so where ranks' copies of the hidden states differ, so can their proposals.

``sglang_dflash2_selector_walk`` runs those three from the wheel's file (:func:`engines.sglang.wheel.compiled.
wheel_functions`: the functions and the class, their ``sglang`` imports left out) for the first proposal slot, with K =
4 candidates and codebooks that make the pairwise term the rank's own logit of the candidate: ``A`` all ones,
``project`` the identity, ``B`` the head's rows (gathered once: a replicated copy, as the selector's own codebooks are).
Each score is then the gathered logit plus the rank's own, so a tie the suite plants between candidates is decided by
the rank's copy, as a trained selector's near ties are.  The tokens are not the classic path's (the lattice adds a term
the head does not have), so the subject is judged by ``test_ranks_agree`` alone (``fn.judged_only``).  The head pins
float32, integer weights, no soft cap, scale 1, no added ids and no ``d2t``
(:mod:`engines.sglang.subjects.dflash_draft`'s, the bias one more feature).  The corrected twin broadcasts rank 0's
proposals, as #40246 does.  Nothing of SGLang is copied here.
"""

from __future__ import annotations

import logging
import types
from functools import cache

import torch

from engines.sglang.subjects.dflash_draft import _check, _with_bias, judged_for_agreement, replicated_head
from engines.sglang.subjects.sampling import _Head
from engines.sglang.wheel import kernels
from engines.sglang.wheel.compiled import wheel_functions
from engines.sglang.wheel.runtime import RANK, _all_gather, _dense_head_weight, _Parallel
from sharded.layout import ShardLayout

FILES = {"dflash": "sglang/srt/models/dflash.py"}
KEEP = (
    "_radix_topk",
    "_project_candidate_logits",
    "candidate_topk",
    "_score_edges",
    "_follow_maps",
    "CandidateSelector",
)
TOP_K = 4  # the selector's candidates per slot (a power of two, as its Triton walk needs)
JUDGED_WHY = (
    "a selector walks lattice scores (the head's logits plus a term from each rank's own copy of the hidden states): "
    "no classic path computes its tokens, so only whether the ranks agree is judged"
)


def why_unavailable() -> str | None:
    """Why the selector cannot run here, or None: the wheel alone (torch runs it, on any group)."""
    return kernels.wheel_missing(FILES)


@cache
def _loaded() -> types.ModuleType:
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    given = {
        "_flashinfer_top_k": None,  # flashinfer is not installed: torch.topk
        "lilicorr_topk_lse": None,  # only with_partition=True calls it
        "selector_walk_triton": None,  # only a CUDA tensor takes the Triton walk
        "get_parallel": _Parallel,
        "tensor_model_parallel_all_gather": _all_gather,
        "should_apply_lm_head_quant_method": lambda lm_head, quant_method: quant_method is not None,
        "is_dense_head_weight": _dense_head_weight,
        "logger": logging.getLogger("tpargmax.sglang.selector"),
    }
    return wheel_functions("dflash_selector", kernels.kernel_paths(FILES)["dflash"], KEEP, given)


def _proposals(hidden, weight, bias, layout: ShardLayout, scale, soft_cap, d2t, group) -> torch.Tensor:
    """The walk's first proposal of each row, on this rank (module docstring)."""
    _check(hidden, weight, layout, soft_cap, scale, d2t)
    if layout.added_vocab:
        raise ValueError("SGLang's DFlash2 candidates are base ids: no added vocabulary")
    hidden, weight = _with_bias(hidden, weight, bias)
    rows, features = hidden.shape
    module = _loaded()
    token = RANK.set(group)
    try:
        ids, vals, _ = module.candidate_topk(hidden, _Head(weight, None, layout), TOP_K)  # the bias is a feature
        replica = replicated_head(weight, layout, group)
        selector = module.CandidateSelector(
            hidden_size=features, vocab_size=layout.vocab, state_rank=features, top_k=TOP_K
        )
        with torch.no_grad():
            selector.predecessor_codebook.fill_(1.0)
            selector.successor_codebook.copy_(replica)
            selector.hidden_projection.weight.copy_(torch.eye(features, dtype=hidden.dtype))
        ids, unary = ids[:, None], vals.float()[:, None]  # one slot: [rows, 1, K]
        scores = selector.build_lattice(
            candidate_ids=ids,
            unary_logits=unary,
            hidden_states=hidden[:, None],
            anchor_token_ids=torch.zeros(rows, dtype=torch.long),
        )
        tokens, _ = selector.sample_path(
            candidate_ids=ids,
            scores=scores,
            uniforms=torch.zeros(rows, 1),
            temperatures=torch.ones(rows),
            greedy_mask=torch.ones(rows, dtype=torch.bool),
        )
        return tokens[:, 0]
    finally:
        RANK.reset(token)


def sglang_dflash2_selector_walk(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """``candidate_topk``, ``CandidateSelector.build_lattice`` and ``sample_path`` (module docstring)."""
    return _proposals(hidden, weight, bias, layout, scale, soft_cap, d2t, group)


def sglang_dflash2_selector_walk_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """The same walk, rank 0's proposals broadcast to every rank (S6's correction, as #40246 proposes)."""
    return group.all_gather(_proposals(hidden, weight, bias, layout, scale, soft_cap, d2t, group))[0]


judged_for_agreement(
    (sglang_dflash2_selector_walk, sglang_dflash2_selector_walk_corrected),
    why_unavailable,
    "SGLang's ParallelLMHead cuts even shards and the walk takes every row",
    JUDGED_WHY,
)
