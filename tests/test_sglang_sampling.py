"""SGLang 0.5.23's candidate top-k and seeded sampler as sampling subjects (engines/sglang/subjects/sampling.py).

The subjects need the opt-in environment (the sglang wheel, Triton, and CUDA or TRITON_INTERPRET=1); without it
these tests skip, with the install command as the reason.
"""

from __future__ import annotations

import math

import pytest
import torch

from engines.sglang.subjects import sampling as ss
from engines.sglang.wheel import kernels as sglang
from reference.sampling import SamplingParams, classic_sample
from tests.suite import sample_on_logits

REASON = ss.why_unavailable()
needs_sglang = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def test_why_unavailable_names_the_install_command():
    """In the default venv (no wheel) the reason is the install command; with everything there, None."""
    reason = ss.why_unavailable()
    assert reason is None or "install-sglang" in reason or "TRITON_INTERPRET" in reason or "Triton" in reason
    if sglang._installed_version() is None:
        assert reason == sglang.INSTALL_HINT


def test_subjects_declare_their_masks_head_and_noise():
    for fn in (ss.sglang_candidate_topk, ss.sglang_candidate_topk_seeded, ss.sglang_candidate_topk_corrected):
        assert fn.masks == ("top_k",)
        assert fn.head["d2t"] == "none" and fn.head["soft_cap"] is None
    assert ss.sglang_candidate_topk_seeded.noise is ss.sglang_murmur_noise
    assert not hasattr(ss.sglang_candidate_topk, "noise")  # the contract's noise


def _run(fn, logits: torch.Tensor, tp: int, params: SamplingParams):
    return sample_on_logits(fn, logits, tp, params, 300.0)[0]  # rank 0's answer


@needs_sglang
@pytest.mark.parametrize("tp", [1, 2])
def test_candidate_topk_matches_the_classic_sampler_on_distinct_logits(tp):
    torch.manual_seed(0)
    logits = torch.randn(4, 128)
    params = SamplingParams(
        torch.tensor([0.0, 1.0, 0.5, 2.0]),
        torch.tensor([0, 4, 1, 8]),
        torch.ones(4),
        torch.tensor([1, 2, 3, 4]),
    )
    want = classic_sample(logits, params)
    tokens, log_probs, kept, notes = _run(ss.sglang_candidate_topk, logits, tp, params)
    assert tokens.tolist() == want.tokens.tolist()
    assert notes == ("",) * 4
    raw = torch.log_softmax(logits.double(), dim=1).gather(1, tokens.unsqueeze(1)).squeeze(1)
    assert torch.allclose(log_probs[:, 0].double(), raw, atol=1e-5)
    assert kept[1].ge(0).sum() == 4 and kept[3].ge(0).sum() == 8


@needs_sglang
def test_rows_candidate_topk_cannot_take_fall_back_with_a_note():
    torch.manual_seed(1)
    logits = torch.randn(2, 64)
    params = SamplingParams(torch.tensor([1.0, 1.0]), torch.tensor([0, 3]), torch.ones(2), torch.tensor([5, 6]))
    tokens, _, _, notes = _run(ss.sglang_candidate_topk, logits, 2, params)
    assert notes == (ss.FALLBACK, "")
    assert tokens.tolist() == classic_sample(logits, params).tokens.tolist()


@needs_sglang
def test_seeded_sampler_keys_its_noise_by_sort_rank_not_by_id():
    """SGLang's seeded top-k path draws the noise of the sorted column: the oracle with the same noise keyed by id
    differs on some rows, while the draws with top-k 1 (greedy) agree."""
    torch.manual_seed(2)
    batch = 32
    logits = torch.randn(batch, 64)
    params = SamplingParams(
        torch.ones(batch), torch.full((batch,), 8), torch.ones(batch), torch.arange(batch, dtype=torch.int64)
    )
    tokens = _run(ss.sglang_candidate_topk_seeded, logits, 2, params)[0]
    by_id = classic_sample(logits, params, noise=ss.sglang_murmur_noise).tokens
    kept = classic_sample(logits, params).kept
    assert bool(kept.gather(1, tokens.unsqueeze(1)).all())  # always inside the top 8
    assert not torch.equal(tokens, by_id)


@needs_sglang
def test_murmur_noise_is_gumbel_shaped():
    noise = ss.sglang_murmur_noise(torch.tensor([7, -7]), torch.arange(4096))
    assert noise.dtype == torch.float32 and noise.shape == (2, 4096)
    assert abs(float(noise.double().mean()) - 0.5772) < 0.05  # the Euler-Mascheroni constant
    assert not torch.equal(noise[0], noise[1])


@needs_sglang
def test_lilicorr_kernel_path_returns_ids_outside_a_row_of_neg_inf():
    """The finding of docs/conformance/sampling/sglang_lilicorr_neg_inf_ids.py, through the loaded functions."""
    logits = torch.full((1, 300), -math.inf)
    logits[0, 5] = 1.0
    _, ids, _ = ss.load().dflash.lilicorr_topk_lse(logits, 4)
    assert ids[0].tolist() == [5, 5, 5, 5] or bool((ids >= 300).any())
