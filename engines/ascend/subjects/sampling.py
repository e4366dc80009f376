"""vllm-ascend 0.23.0.post1's sampler under ``enable_reduce_sample``: its top-k/top-p reduction over per-rank
candidates, as a subject of the sampling properties; and its rejection sampler's sampled rows
(:func:`ascend_rejection_sample`, :mod:`engines.ascend.subjects.rejection` says what runs).

A sampling step reaches it as vLLM's ``Sampler.sample`` does with vllm-ascend's pieces in place:

1. the greedy rows' tokens: ``AscendSampler.greedy_sample`` (``sample/sampler.py`` L105-126) on the rank's logits,
   cut as :func:`engines.ascend.subjects.pieces.rank_logits` says;
2. every row's logits divided by its temperature; a row whose temperature is below ``_SAMPLING_EPS`` (1e-5) is greedy
   and divided by 1 (vLLM's ``Sampler.sample`` and ``apply_temperature``);
3. the model runner's ``max_topk`` (``worker/model_runner_v1.py`` L2623-2625, restated here: the largest top-k of
   the rows whose top-k is below the rank's width, where any row has a top-k; ``torch``'s ``max`` of none raises),
   handed to ``prepare_sampling``;
4. ``_apply_top_k_top_p_pytorch``'s reduce branch (``sample/sampler.py`` L194-266), run from the sdist's file: each
   rank's top ``min(max_topk, width)`` values and ``local index + rank * width`` ids gathered over ranks, then the
   rows' top-k and top-p as masks over the gathered candidates.  vLLM's metadata hands it ``k`` (``None`` when no
   row has a top-k; the vocabulary where a row has none) and ``p`` (``None`` when no row has a top-p; 1 where off).
   On A2/A3 the same gathered candidates go to ``torch_npu.npu_top_k_top_p`` instead of the masks (L269-291), an NPU
   kernel not judged here;
5. the draw: ``forward_native`` (L146-191) draws with ``random_sample`` (NPU streams, exponential races keyed by
   column); here the contract's draw over the kept candidates stands in for it, ``argmax(x + gumbel_noise(seed,
   id))``, first maximum by id, so the properties can compare tokens given the same noise.  What is judged is the
   candidates and masks vllm-ascend computes (the kept set), and the token the contract's draw gives from them.

The kept set returned is every gathered candidate whose value is not ``-inf`` (a greedy row: its token).  No
log-probs (vllm-ascend returns the candidates' processed values, not per-token log-probs).  The head pins no ``d2t``
(a target model's sampler).  Nothing of vllm-ascend is copied here.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from engines.ascend.subjects.pieces import LAYOUTS_WHY, rank_logits, sampler_module
from engines.ascend.subjects.rejection import GREEDY_TEMPERATURE, SamplingMetadata, rejection_module, step
from engines.ascend.wheel.source import in_group, why_unavailable
from reference.checks import InvalidInput
from reference.sampling import SamplingParams, gumbel_noise
from sharded.keys import encode_keys
from sharded.layout import ShardLayout
from sharded.local_sampling import sampler

SAMPLING_EPS = 1e-5  # vLLM's (and sample/sampler.py's) _SAMPLING_EPS: a row whose temperature is below it is greedy


def _vllm_k_p(
    sampling: SamplingParams, vocab: int, greedy: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """vLLM's ``SamplingMetadata.top_k`` / ``top_p``: None where no row has one, else the vocabulary / 1 where off
    (a greedy request has neither: vLLM's ``SamplingParams`` clears them)."""
    on = (sampling.top_k > 0) & (sampling.top_k < vocab) & ~greedy
    k = torch.where(on, sampling.top_k, vocab) if bool(on.any()) else None
    top_p = torch.where(greedy, 1.0, sampling.top_p)
    p = top_p if bool((top_p < 1).any()) else None
    return k, p


def shipped_max_topk(k: torch.Tensor, width: int, vocab: int) -> int:
    """The model runner's ``max_topk`` (``model_runner_v1.py`` L2624): the largest k below the rank's width."""
    return int(k[k < width].max())


def shipped_steps() -> tuple[Any, Any, Any, Any]:
    """The rank's logits, the greedy pick, ``max_topk`` and the top-k/top-p reduce, as vllm-ascend ships them."""
    module = sampler_module()
    return rank_logits, module.AscendSampler.greedy_sample, shipped_max_topk, module._apply_top_k_top_p_pytorch


def reduce_and_draw(steps, hidden, weight, bias, layout: ShardLayout, sampling, scale, soft_cap, d2t, group):
    """A sampling step through ``steps`` (:func:`shipped_steps`'s four), then the contract's draw over the kept
    candidates (module docstring)."""
    if d2t is not None:
        raise InvalidInput("d2t: vllm-ascend's sampler samples the target model's logits; it maps no draft ids")
    sampling.check(hidden.shape[0])
    logits_of, greedy_sample, max_topk_of, apply_top_k_top_p = steps
    logits = logits_of(hidden, weight, bias, layout, scale, soft_cap)
    device = logits.device
    params = sampling.to(device)
    greedy_tokens = in_group(group, greedy_sample, logits.clone())
    greedy = params.temperature < SAMPLING_EPS  # vLLM's Sampler: such a row takes the greedy pick
    x = logits.float() / torch.where(greedy, 1.0, params.temperature).unsqueeze(1)
    k, p = _vllm_k_p(params, layout.vocab, greedy)
    max_topk = None if k is None else max_topk_of(k, logits.shape[1], layout.vocab)
    vals, ids = in_group(group, apply_top_k_top_p, x, k, p, max_topk)
    kept = vals != -math.inf  # a NaN is kept: the contract's draw ranks it first
    noise = gumbel_noise(params.seed, ids)
    score = (vals.float() + noise.to(device)).masked_fill(~kept, -math.inf)
    best = encode_keys(score, ids).argmax(dim=1, keepdim=True)
    drawn = ids.gather(1, best).squeeze(1)
    tokens = torch.where(greedy, greedy_tokens.long(), drawn.long())
    kept_ids = torch.where(kept & ~greedy.unsqueeze(1), ids, -1)
    kept_ids[:, 0] = torch.where(greedy, tokens, kept_ids[:, 0])
    return tokens, None, kept_ids, ("",) * len(tokens)


def _reduce(*args: Any):
    return reduce_and_draw(shipped_steps(), *args)


def rejection_draw(steps, hidden, weight, bias, layout: ShardLayout, sampling, scale, soft_cap, d2t, group):
    """A speculative step's verification of one n-gram draft per row through ``steps`` (the rank's logits, the
    rejection sampler's module, ``max_topk``): each request's first output token
    (:mod:`engines.ascend.subjects.rejection`)."""
    if d2t is not None:
        raise InvalidInput("d2t: vllm-ascend's rejection sampler verifies against the target's logits")
    sampling.check(hidden.shape[0])
    logits_of, module, max_topk_of = steps
    logits = logits_of(hidden, weight, bias, layout, scale, soft_cap)
    params = sampling.to(logits.device)
    greedy = params.temperature < SAMPLING_EPS
    k, p = _vllm_k_p(params, layout.vocab, greedy)
    top_k = None if k is None else max_topk_of(k, logits.shape[1], layout.vocab)
    generators = {r: torch.Generator().manual_seed(int(params.seed[r])) for r in range(len(greedy)) if not greedy[r]}
    metadata = SamplingMetadata(
        temperature=torch.where(greedy, float(GREEDY_TEMPERATURE), params.temperature),
        all_greedy=bool(greedy.all()),
        all_random=not bool(greedy.any()),
        top_k=k,
        top_p=p,
        generators=generators,
    )
    tokens = step(module, logits, metadata, top_k, group)[:, 0].long()
    return tokens, None, None, ("",) * len(tokens)


def shipped_rejection_steps() -> tuple[Any, Any, Any]:
    return rank_logits, rejection_module(), shipped_max_topk


ascend_rejection_sample = sampler(
    lambda *args: rejection_draw(shipped_rejection_steps(), *args),
    "ascend_rejection_sample",
    """vllm-ascend's rejection sampler with ``enable_reduce_sample``: one n-gram draft per row, the first output
    token; sampled rows drawn by the engine's own randomness, from each request's generator.""",
)


ascend_top_k_top_p = sampler(
    _reduce,
    "ascend_top_k_top_p",
    """vllm-ascend's sampler with ``enable_reduce_sample``: greedy rows by ``greedy_sample``, the rest drawn (by the
    contract's noise) from ``_apply_top_k_top_p_pytorch``'s gathered candidates (module docstring).""",
)


def declare(fn: Any) -> Any:
    """What every vllm-ascend sampler subject declares: its head, its needs, its masks and layouts (and that it
    draws from per-rank candidates, which the rejection sampler's sampled rows do not)."""
    fn.head, fn.needs, fn.masks, fn.draws_from_candidates = {"d2t": "none"}, why_unavailable, ("top_k", "top_p"), True
    fn.layouts, fn.layouts_why = ("diverged",), LAYOUTS_WHY
    return fn


declare(ascend_top_k_top_p)
declare(ascend_rejection_sample).draws_from_candidates = False
ascend_rejection_sample.noise_key = "the request's generator, in the acceptance test and the recovered token's race"
