"""vllm-ascend 0.23.0.post1's rejection sampler under ``enable_reduce_sample``: a speculative step's verification,
``AscendRejectionSampler.forward`` (``sample/rejection_sampler.py`` L147-262), run from the sdist's file with every
function it calls there (``apply_sampling_constraints``, ``rejection_sample``, ``greedy_sample``, the PyTorch twins
of the Triton-Ascend kernels: ``HAS_TRITON`` is false), and its sampled rows as a subject of the sampling
properties (:func:`ascend_rejection_sample`; the greedy subjects are in :mod:`engines.ascend.subjects.greedy`).

Stand-ins, for what a whole engine would hand these functions: the bonus token's sampler (``self.sampler``: a
placeholder per request; every request has a draft, and the first output judged never is the bonus); vLLM's
``SamplingMetadata`` and ``SpecDecodeMetadata`` (fields by vLLM's names); vLLM 0.23.0's constants
``GREEDY_TEMPERATURE`` 0, ``PLACEHOLDER_TOKEN_ID`` -1, ``MAX_SPEC_LEN`` 128; ``is_310p()`` false (A2/A3); the
PyTorch top-k/top-p (``_apply_top_k_top_p_pytorch``: on A2/A3 the same gathered candidates go to
``torch_npu.npu_top_k_top_p``); vLLM's ``generate_uniform_probs``, restated: one float64 uniform per draft token,
from its request's generator where it has one.

:func:`ascend_rejection_sample` verifies one n-gram draft per row (token 0, no draft probabilities): the first
output token is the draft where the uniform lies at or below the draft's target probability, else a recovered
token, an exponential race over the other candidates (``sample_recovered_tokens_pytorch``).  Either way its law is
the target's distribution over the kept set, so the sampled rows are judged by their support and distribution
(their randomness is the engine's, keyed by each request's generator: ``fn.noise_key``), the greedy rows token for
token.  Every sampled row is a seeded request (a generator from its seed), so every rank draws alike.  Nothing of
vllm-ascend is copied here.
"""

from __future__ import annotations

import dataclasses
import types
from functools import cache
from typing import Any

import torch

from engines.ascend.subjects.pieces import sampler_module
from engines.ascend.wheel.source import functions, in_group

GREEDY_TEMPERATURE, PLACEHOLDER_TOKEN_ID, MAX_SPEC_LEN = 0, -1, 128  # vllm/v1/sample/rejection_sampler.py, 0.23.0


@dataclasses.dataclass
class SamplingMetadata:
    """vLLM's ``SamplingMetadata``, the fields the rejection sampler reads (no penalties, processors or logprobs)."""

    temperature: torch.Tensor
    all_greedy: bool
    all_random: bool
    top_k: torch.Tensor | None
    top_p: torch.Tensor | None
    generators: dict[int, torch.Generator]
    max_num_logprobs: int | None = None
    no_penalties: bool = True
    bad_words_token_ids: dict[int, list[list[int]]] = dataclasses.field(default_factory=dict)
    output_token_ids: list[list[int]] = dataclasses.field(default_factory=list)
    spec_token_ids: list[list[int]] = dataclasses.field(default_factory=list)
    allowed_token_ids_mask: torch.Tensor | None = None
    logitsprocs: Any = dataclasses.field(default_factory=lambda: types.SimpleNamespace(non_argmax_invariant=[]))
    thinking_budget_state_holder: Any = None  # vLLM's newer field, which checkouts after 0.23.0.post1 read


class _BonusSampler:
    """The bonus token's sampler: a placeholder token per request (no judged output reads it)."""

    def __call__(self, logits: torch.Tensor, **kwargs: Any) -> Any:
        tokens = torch.full((logits.shape[0], 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=logits.device)
        return types.SimpleNamespace(sampled_token_ids=tokens, logprobs_tensors=None)


def generate_uniform_probs(
    num_tokens: int, num_draft_tokens: list[int], generators: dict[int, torch.Generator], device: Any
) -> torch.Tensor:
    """vLLM's: float64 uniforms, one per draft token, a request's from its generator where it has one."""
    uniform = torch.rand(num_tokens, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    start = 0
    for request, count in enumerate(num_draft_tokens):
        if request in generators and count:
            uniform[start : start + count] = torch.rand(count, dtype=torch.float64, generator=generators[request])
        start += count
    return uniform.to(device)


def load_rejection(apply_top_k_top_p: Any) -> types.ModuleType:
    """A fresh copy of ``sample/rejection_sampler.py``'s functions (a correction replaces some in its own)."""
    base = type("RejectionSampler", (), {"__init__": lambda self, sampler: None})
    given = {
        "RejectionSampler": base,
        "HAS_TRITON": False,
        "is_310p": lambda: False,
        "GREEDY_TEMPERATURE": GREEDY_TEMPERATURE,
        "PLACEHOLDER_TOKEN_ID": PLACEHOLDER_TOKEN_ID,
        "MAX_SPEC_LEN": MAX_SPEC_LEN,
        "generate_uniform_probs": generate_uniform_probs,
        "apply_top_k_top_p": apply_top_k_top_p,
        "MinTokensLogitsProcessor": type("MinTokensLogitsProcessor", (), {}),
        "SamplerOutput": lambda **fields: types.SimpleNamespace(**fields),
    }
    return functions("rejection", None, **given)


@cache
def rejection_module() -> types.ModuleType:
    return load_rejection(sampler_module()._apply_top_k_top_p_pytorch)


def step(module: types.ModuleType, logits: torch.Tensor, sampling: SamplingMetadata, top_k, group) -> torch.Tensor:
    """``module.AscendRejectionSampler.forward`` over one draft token (0, no draft probabilities) per row, with
    ``top_k`` what the model runner hands ``prepare_sampling``: every request's output tokens ``[B, 2]``."""
    batch, device = logits.shape[0], logits.device
    metadata = types.SimpleNamespace(
        draft_token_ids=torch.zeros(batch, dtype=torch.int32, device=device),
        num_draft_tokens=[1] * batch,
        max_spec_len=1,
        cu_num_draft_tokens=torch.arange(1, batch + 1, dtype=torch.int32, device=device),
        target_logits_indices=torch.arange(batch, device=device),
        bonus_logits_indices=torch.arange(batch, device=device),
    )
    verifier = module.AscendRejectionSampler.__new__(module.AscendRejectionSampler)
    verifier.sampler, verifier.is_processed_logprobs_mode, verifier.top_k = _BonusSampler(), False, top_k
    verifier.synthetic_mode, verifier.synthetic_conditional_rates = False, None  # newer vLLM sets them (off)
    return in_group(group, verifier.forward, metadata, None, logits, sampling).sampled_token_ids
