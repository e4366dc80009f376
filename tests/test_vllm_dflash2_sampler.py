"""vLLM's DFlash2 candidate sampler (0.32.0 and 0.33.0) as a sampling subject
(engines/vllm/subjects/dflash2_sampler.py).

The subject needs an opt-in environment (vLLM, Triton and NumPy, and CUDA or TRITON_INTERPRET=1);
without it these tests skip with ``engines.vllm.wheel.triton_files.INSTALL_HINT`` (or the device hint) as the reason.
The first test runs everywhere.
"""

from __future__ import annotations

import pytest
import torch

from engines.vllm.subjects import dflash2_sampler as ds
from engines.vllm.wheel.triton_files import INSTALL_HINT

REASON = ds.why_unavailable()
needs_vllm = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def test_subject_imports_and_declares_its_contract_without_vllm():
    """Imports in the default venv (vLLM, Triton and NumPy lazily) and declares what the properties read."""
    for fn in (ds.vllm_dflash2_sampler, ds.vllm_dflash2_sampler_corrected):
        assert fn.masks == ("top_k",)
        assert fn.process_bound is True and callable(fn.start)
        assert fn.head == {"d2t": "none", "target_extra": 0}
        assert fn.noise.__name__ == "vllm_draft_noise"  # vllm_noise(drafting=True)
    assert ds.vllm_dflash2_sampler_step2.noise.__name__ == "vllm_draft_noise_step1"
    if REASON is not None and ds.vllm_dir() is None:
        assert REASON == INSTALL_HINT


@pytest.mark.parametrize(("release", "bonus"), [("0.32.0", 0), ("0.33.0", 1)])
def test_each_release_gets_its_rejection_layout(monkeypatch, release, bonus):
    """0.32.0 knows a bonus logit by ``num_speculative_steps``; 0.33.0 by the next logit's local position, so its
    requests carry their bonus logit (one logit per request would be all bonus)."""
    monkeypatch.setattr(ds, "vllm_release", lambda: release)
    assert ds._bonus_logits() == bonus


@needs_vllm
@pytest.mark.parametrize("steps", [1, 2])
def test_walk_draws_argmax_of_unary_over_t_plus_the_declared_noise(steps):
    """``CandidateSampler.sample`` with sample_pos 1 draws at the position ``fn.noise`` reads (0, salted by vLLM);
    a greedy row (temperature 0) takes the plain maximum; the processed log-prob is log_softmax(unary / T), from
    the rejection sampler's statistics laid out as the release lays out a request (all-bonus rows would leave
    them unset).  At the second step the noise is the release's: from 0.33.0 on, another seed (``spec_step_seed``)."""
    from engines.vllm.subjects.gumbel import vllm_noise
    from engines.vllm.wheel.triton_files import GUMBEL, load
    from reference.sampling import SamplingParams

    torch.manual_seed(0)
    n, vocab, k = 24, 50, 8
    ids = torch.stack([torch.randperm(vocab)[:k] for _ in range(n)])
    unary = torch.randn(n, k)
    temperature = torch.rand(n) + 0.3
    temperature[0] = 0.0
    seeds = torch.randint(-(2**62), 2**62, (n,))
    params = SamplingParams(temperature, torch.full((n,), k), torch.ones(n), seeds)
    tokens, processed = ds._walk(ids, unary, params, vocab, vocab, steps)
    t = torch.where(temperature == 0, 1.0, temperature).unsqueeze(1)
    fn = ds.vllm_dflash2_sampler_step2 if steps == 2 else ds.vllm_dflash2_sampler
    noise = fn.noise(seeds, ids)
    mixed = not torch.equal(noise, vllm_noise(drafting=True)(seeds, ids))
    assert mixed == (steps == 2 and hasattr(load(GUMBEL), "spec_step_seed"))
    score = torch.where((temperature == 0).unsqueeze(1), unary, unary / t + noise)
    assert torch.equal(tokens, ids.gather(1, score.argmax(1, keepdim=True)).squeeze(1))
    at = (ids == tokens.unsqueeze(1)).float().argmax(1, keepdim=True)
    want = torch.log_softmax((unary / t).double(), dim=1).gather(1, at).squeeze(1)
    assert torch.allclose(processed[1:].double(), want[1:], atol=1e-5)


def _gloo_run(spec: str, case, plan):
    from dataclasses import replace

    from groups.pool import RankPool
    from properties.cases.tensors import build
    from properties.harness.runner import rank_kwargs
    from properties.sampling.params import params_of

    inputs = build(replace(case, **ds.HEAD))
    params = params_of(inputs, plan)
    pool = RankPool(case.tp, backend="gloo", timeout=300, start_timeout=300)
    try:
        kwargs = [{**rank_kwargs(inputs, r), "sampling": params} for r in range(case.tp)]
        return inputs, params, pool.run(spec, kwargs)[0]
    finally:
        pool.close()


@needs_vllm
def test_on_gloo_small_k_matches_the_classic_sampler_and_k_off_raises():
    """Distinct logits, k 4 on every row (fits every shard): the classic sampler's tokens with vLLM's drafting
    noise, on both ranks alike.  With top-k off (K = the vocabulary) vLLM's ``torch.topk`` on a shard raises."""
    from engines.versions import unlisted_vllm
    from groups.tasks import RemoteError
    from properties.cases.case import Case
    from properties.cases.plans import SamplePlan
    from properties.sampling.checks import oracle_sample

    spec = "engines.vllm.subjects.dflash2_sampler:vllm_dflash2_sampler"
    case = Case(batch=6, hidden=4, vocab=40, tp=2, seed=3, weights="normal")
    inputs, params, out = _gloo_run(spec, case, SamplePlan(temperature="mixed", top_k="small", seed=1))
    want = oracle_sample(inputs, params, ds.vllm_dflash2_sampler.noise)
    tokens, log_probs, kept, notes = out[0]
    assert torch.equal(out[1][0], tokens) and notes == ("",) * case.batch
    on = (params.top_k > 0) & (params.top_k < case.vocab)
    assert log_probs.dtype == torch.float32 and kept.dtype == torch.int64
    if unlisted_vllm() is not None:  # what another build draws is its own: --baseline judges it
        return
    assert torch.equal(tokens[on], want.tokens[on])
    with pytest.raises(RemoteError, match="selected index k out of range"):
        _gloo_run(spec, case, SamplePlan(temperature="one", top_k="off", seed=1))
