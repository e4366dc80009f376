"""Corrections of vllm-ascend 0.23.0.post1's reduce picks and sampler (its page's causes): the project's own code in
place of the sdist's cut, per-rank pick and top-k/top-p reduce, run through the same properties as the row beside
the original (``tpargmax report --page ascend``).

* The logits processor keeps the rank's whole shard (not ``[:, :num_org_embeddings_per_partition]``), and the pick
  reads its token columns alone, with their global ids from the layout: the rank's first base id, not
  ``rank * width`` (the last rank's width is smaller); added ids compete; ids at or above the logits vocabulary and
  padding never do; a rank without tokens offers ``-inf`` at its first id instead of raising.
* Over ranks: the largest value (NaN first), the smallest id among equal values (one ordered key per row and one
  ``all_reduce(MAX)``, :func:`sharded.local_argmax.reduce_keys`), not the lowest rank.
* The rejection sampler's greedy rows read the logits ``apply_sampling_constraints`` was given (after the step's
  own NaN cleaning, which stays), not the candidate table it returns beside sampled requests, whose columns are not
  token ids.
* The sampler's top-k/top-p reduce (:func:`apply_top_k_top_p`): every rank offers the same number of candidates (the
  batch's largest top-k and every token tied with its k-th value, the most any rank has; or every token where no row
  has a top-k, up to the widest rank's token count; a narrower rank pads with ``-inf``), its tokens' own ids; a row
  keeps the candidates at or above its k-th largest where its top-k is below the vocabulary (not below the rank's
  width), and top-p then works on what top-k kept, as vLLM's ``apply_top_k_top_p`` orders them.  The model runner's
  ``max_topk`` is the largest top-k of the rows that have one (:func:`max_topk`), not of those below the rank's width.

Each corrected greedy subject runs the same vllm-ascend functions as its original, from fresh copies of their modules
with ``greedy_sample`` (and the rejection sampler's ``apply_sampling_constraints``) replaced by these.  The corrected
sampler replaces both of the shipped pieces its original runs (``greedy_sample``, ``_apply_top_k_top_p_pytorch``),
so it runs none of vllm-ascend's code: it shows that these corrections, in the same glue and draw, remove the
causes.
"""

from __future__ import annotations

import contextvars
import math
import types
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F

from engines.ascend.subjects import greedy as subjects
from engines.ascend.subjects import rejection
from engines.ascend.subjects import sampling as sampler_subjects
from engines.ascend.wheel.source import RANK, functions, in_group, why_unavailable
from sharded.group import gathered
from sharded.layout import ShardLayout, every_rank
from sharded.local_argmax import checked_shard_logits, reduce_keys, token_logits
from sharded.local_sampling import sampler

LAYOUT: contextvars.ContextVar[ShardLayout] = contextvars.ContextVar("ascend_layout")
GIVEN: contextvars.ContextVar[torch.Tensor] = contextvars.ContextVar("ascend_constrained")


def greedy_sample(logits: torch.Tensor) -> torch.Tensor:
    """The corrected pick over the rank's whole shard ``logits`` (module docstring)."""
    return reduce_keys(logits, LAYOUT.get(), RANK.get())


def _greedy_from_given(logits: torch.Tensor) -> torch.Tensor:
    """The rejection sampler's: the logits ``apply_sampling_constraints`` was given, whatever it returned."""
    return greedy_sample(GIVEN.get())


@cache
def _rejection() -> types.ModuleType:
    module = rejection.load_rejection(apply_top_k_top_p)
    constrain = module.apply_sampling_constraints

    def apply_sampling_constraints(logits: torch.Tensor, *args: Any) -> Any:
        GIVEN.set(logits.clone())
        return constrain(logits, *args)

    module.apply_sampling_constraints, module.greedy_sample = apply_sampling_constraints, _greedy_from_given
    return module


@cache
def _proposer() -> types.ModuleType:
    module = functions("proposer", ("greedy_sample", "AscendSpecDecodeBaseProposer.compute_draft_token_ids"))
    module.greedy_sample = greedy_sample
    return module


def _whole(hidden, weight, bias, layout: ShardLayout, scale, soft_cap) -> torch.Tensor:
    LAYOUT.set(layout)
    return checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)


def ascend_sampler_greedy_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """The sampler's greedy pick, corrected."""
    return in_group(group, greedy_sample, _whole(hidden, weight, bias, layout, scale, soft_cap))


def ascend_rejection_greedy_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """``AscendRejectionSampler.forward``'s greedy pick, every request greedy, corrected."""
    logits = _whole(hidden, weight, bias, layout, scale, soft_cap)
    return subjects.verify(_rejection(), logits, False, group)


def ascend_rejection_greedy_beside_sampled_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """The same beside one sampled request, corrected."""
    logits = _whole(hidden, weight, bias, layout, scale, soft_cap)
    return subjects.verify(_rejection(), logits, True, group)


def ascend_draft_greedy_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """``compute_draft_token_ids`` with the corrected pick, then vllm-ascend's ``d2t`` mapping."""
    logits = _whole(hidden, weight, bias, layout, scale, soft_cap)
    return subjects.propose(_proposer(), logits, hidden, d2t, group)


for _fn in (
    ascend_sampler_greedy_corrected,
    ascend_rejection_greedy_corrected,
    ascend_rejection_greedy_beside_sampled_corrected,
    ascend_draft_greedy_corrected,
):
    _fn.head = {"d2t": "none"}
    _fn.needs = why_unavailable
    _fn.layouts, _fn.layouts_why = ("diverged",), sampler_subjects.LAYOUTS_WHY
ascend_draft_greedy_corrected.head = {}


def max_topk(k: torch.Tensor, width: int, vocab: int) -> int | None:
    """The largest top-k of the rows that have one (below the vocabulary), None where none has."""
    on = k[k < vocab]
    return int(on.max()) if on.numel() else None


def apply_top_k_top_p(logits: torch.Tensor, k, p, top_k) -> tuple[torch.Tensor, torch.Tensor]:
    """The reduce branch of ``_apply_top_k_top_p_pytorch``, corrected (module docstring): ``logits`` is the rank's
    whole shard over the temperature; the gathered candidates' values, masked, and their ids."""
    layout, group = LAYOUT.get(), RANK.get()
    values, ids = token_logits(logits, layout)
    width = max(len(lay.token_ids()) for lay in every_rank(layout))
    padded = F.pad(values, (0, width - values.shape[1]), value=-math.inf)
    count = width
    if top_k is not None and k is not None and top_k < width:  # the top_k-th value's ties too, as many on every rank
        kth = padded.topk(top_k, dim=-1).values[:, -1:]
        tied = (padded >= kth).sum(dim=-1).max().reshape(1)
        count = int(group.all_reduce(tied, op="max").item())
    padded_ids = F.pad(ids, (0, width - ids.shape[0]))  # a padded column's value is -inf: never kept
    vals, index = padded.topk(count, dim=-1)
    candidates, candidate_ids = gathered(group, vals), gathered(group, padded_ids[index])
    if k is None and p is None:
        return candidates, candidate_ids
    if k is not None:
        on = (k < layout.vocab).unsqueeze(1)
        ordered = candidates.sort(dim=-1, descending=True).values
        kth = ordered.gather(-1, (k.clamp(1, ordered.shape[1]) - 1).unsqueeze(1))
        candidates = candidates.masked_fill(on & (candidates < kth), -math.inf)
    if p is not None:
        probs = candidates.softmax(dim=-1)
        probs_sort = probs.sort(dim=-1).values
        outside = probs_sort.cumsum(dim=-1) <= (1 - p.unsqueeze(1))
        outside[:, -1] = False  # at least one
        cutoff = probs_sort.gather(-1, outside.sum(dim=-1, keepdim=True))
        candidates = candidates.masked_fill(probs < cutoff, -math.inf)
    return candidates, candidate_ids


def _sampler_steps() -> tuple:
    return _whole, greedy_sample, max_topk, apply_top_k_top_p


ascend_top_k_top_p_corrected = sampler_subjects.declare(
    sampler(
        lambda *args: sampler_subjects.reduce_and_draw(_sampler_steps(), *args),
        "ascend_top_k_top_p_corrected",
        """The sampler with the corrected greedy pick, ``max_topk`` and top-k/top-p reduce (module docstring).""",
    )
)


ascend_rejection_sample_corrected = sampler_subjects.declare(
    sampler(
        lambda *args: sampler_subjects.rejection_draw((_whole, _rejection(), max_topk), *args),
        "ascend_rejection_sample_corrected",
        """The rejection sampler with the corrected greedy pick, ``max_topk`` and top-k/top-p reduce.""",
    )
)
ascend_rejection_sample_corrected.draws_from_candidates = False
ascend_rejection_sample_corrected.noise_key = sampler_subjects.ascend_rejection_sample.noise_key
