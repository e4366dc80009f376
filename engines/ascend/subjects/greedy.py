"""vllm-ascend 0.23.0.post1's greedy picks under ``enable_reduce_sample``, as subjects of the argmax properties.

With the switch on, ``AscendLogitsProcessor._get_logits_normal`` (``ops/vocab_parallel_embedding.py`` L323-341)
gathers nothing: each rank keeps its own shard's logits, cut to ``lm_head.num_org_embeddings_per_partition`` (its
base ids: ``org_vocab_end_index - org_vocab_start_index``, fewer on the last rank, none past the base ids), and every
pick reduces over ranks.  Here each rank's logits are the contract's (:func:`checked_shard_logits`: ``F.linear``,
soft cap, scale, as vLLM's ``LogitsProcessor.forward`` applies them after ``_get_logits``), cut by
``_get_logits_normal`` itself (:func:`rank_logits`).  What runs of vllm-ascend, from its files
(:func:`engines.ascend.wheel.source.functions`; the names they use are that module's):

* :func:`ascend_sampler_greedy`: ``AscendSampler.greedy_sample`` (``sample/sampler.py`` L105-126), the sampler's
  pick for greedy requests.
* :func:`ascend_rejection_greedy`: a speculative step's verification, ``AscendRejectionSampler.forward``
  (``sample/rejection_sampler.py`` L147-262), which runs ``apply_sampling_constraints`` and ``rejection_sample``
  (L352-) and so its ``greedy_sample`` (L264-280).  Every case row is a greedy request with one draft token; the
  token judged is the request's first output, the target's greedy pick whatever the draft.
* :func:`ascend_rejection_greedy_beside_sampled`: the same step with one sampled request after the case's rows
  (temperature 1, top-p 0.9, no top-k; its logits row 0's): the greedy rows are judged, as vLLM batches greedy
  requests beside sampled ones.  No top-k: a batch that mixes rows with and without one is the sampler's subject's
  (``_apply_top_k_top_p_pytorch`` then gathers a negative index), and would hide what the greedy rows get.
* :func:`ascend_draft_greedy`: the draft proposer's pick, ``AscendSpecDecodeBaseProposer.compute_draft_token_ids``
  (``spec_decode/llm_base_proposer.py`` L1039-1052) for an EAGLE3 draft: the module's ``greedy_sample`` (L120-134),
  then ``next_token + draft_id_to_target_id[next_token]``; without a ``d2t`` the pick alone.

Stand-ins: the proposer's ``self.model`` (its ``logits_processor`` returns the rank's cut logits, its
``draft_id_to_target_id`` is the case's ``d2t``); the rejection sampler's, :mod:`engines.ascend.subjects.rejection`
says.  Nothing of vllm-ascend is copied here.
"""

from __future__ import annotations

import types
from functools import cache

import torch

from engines.ascend.subjects.pieces import LAYOUTS_WHY, rank_logits, sampler_module
from engines.ascend.subjects.rejection import GREEDY_TEMPERATURE, SamplingMetadata, rejection_module, step
from engines.ascend.wheel.source import functions, in_group, why_unavailable
from sharded.layout import ShardLayout


def ascend_sampler_greedy(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``AscendSampler.greedy_sample`` on the rank's cut logits."""
    logits = rank_logits(hidden, weight, bias, layout, scale, soft_cap)
    return in_group(group, sampler_module().AscendSampler.greedy_sample, logits)


def verify(module: types.ModuleType, logits: torch.Tensor, sampled: bool, group) -> torch.Tensor:
    """``module``'s verification over one draft token per row (and one sampled request after them where
    ``sampled``: temperature 1, top-p 0.9): the rows' first outputs."""
    rows = logits.shape[0]
    if sampled:
        logits = torch.cat([logits, logits[:1]])
    greedy = torch.arange(logits.shape[0], device=logits.device) < rows
    sampling = SamplingMetadata(
        temperature=torch.where(greedy, float(GREEDY_TEMPERATURE), 1.0),
        all_greedy=not sampled,
        all_random=False,
        top_k=None,
        top_p=torch.where(greedy, 1.0, 0.9) if sampled else None,  # vLLM: 1 where a request has none
        generators={},
    )
    return step(module, logits, sampling, None, group)[:rows, 0].long()


def ascend_rejection_greedy(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``AscendRejectionSampler.forward``'s greedy pick, every request greedy."""
    return verify(rejection_module(), rank_logits(hidden, weight, bias, layout, scale, soft_cap), False, group)


def ascend_rejection_greedy_beside_sampled(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """``AscendRejectionSampler.forward``'s greedy pick for the case's rows, one sampled request beside them."""
    return verify(rejection_module(), rank_logits(hidden, weight, bias, layout, scale, soft_cap), True, group)


@cache
def proposer_module() -> types.ModuleType:
    return functions("proposer", ("greedy_sample", "AscendSpecDecodeBaseProposer.compute_draft_token_ids"))


def ascend_draft_greedy(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``compute_draft_token_ids`` of an EAGLE3 draft (module docstring)."""
    logits = rank_logits(hidden, weight, bias, layout, scale, soft_cap)
    return propose(proposer_module(), logits, hidden, d2t, group)


def propose(module: types.ModuleType, logits: torch.Tensor, hidden: torch.Tensor, d2t, group) -> torch.Tensor:
    """``module``'s ``compute_draft_token_ids`` for an EAGLE3 draft whose processor returns ``logits``."""
    model = types.SimpleNamespace(logits_processor=lambda head, hidden_states: logits, lm_head=None)
    model.draft_id_to_target_id = d2t
    proposer = types.SimpleNamespace(method="eagle3", model=model)
    compute = module.AscendSpecDecodeBaseProposer.compute_draft_token_ids
    return in_group(group, compute, proposer, hidden).long()


for _fn in (
    ascend_sampler_greedy,
    ascend_rejection_greedy,
    ascend_rejection_greedy_beside_sampled,
    ascend_draft_greedy,
):
    _fn.head = {"d2t": "none"}
    _fn.needs = why_unavailable
    _fn.layouts, _fn.layouts_why = ("diverged",), LAYOUTS_WHY
ascend_draft_greedy.head = {}
