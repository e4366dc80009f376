"""tpu-inference 0.32.0's sampler on a simulated JAX mesh (engines/tpu_inference/wheel/adapter.py and sampler.py).

The subjects need the opt-in environment (``tpargmax install-tpu-inference``: jax, NumPy and the wheel); the
default one has neither JAX nor NumPy, and there these tests skip with that command as the reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest
import torch

from engines.tpu_inference.subjects import sampler as subjects
from engines.tpu_inference.wheel import adapter as tpu
from reference.sampling import SamplingParams, classic_sample
from sharded.impls import Impl, shipped
from tests.suite import run, sample_on_logits
from tpargmax.cli import main

REASON = tpu.why_unavailable()
needs_jax = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SUBJECTS = (subjects.tpu_inference_classic, subjects.tpu_inference_distributed)


def test_the_install_is_jax_then_the_wheel_without_dependencies_then_a_check(capsys):
    assert main(["install-tpu-inference", "--dry-run"]) == 0
    out = capsys.readouterr()
    lines = [line.split(" ", 2)[2] for line in out.out.splitlines()]
    assert out.err == "" and lines == [
        "-m pip install jax==0.10.2 jaxlib==0.10.2",
        f"-m pip install --no-deps tpu-inference=={tpu.VERSION}",
        "-c '<load the tpu-inference sampler on a CPU mesh>'",
    ]


def test_without_jax_the_subjects_skip_with_the_install_command_and_nothing_is_imported():
    """Importing the adapter imports no jax (nor NumPy: torch imports it where it is installed, the default venv has
    none); where jax is absent the reason names the command.  The import runs in a process of its own, forked from
    one that imported torch alone (tests.forked_runs): the project's modules, the adapter's included, import fresh."""
    code = "import sys, engines.tpu_inference.subjects.sampler; print('jax' in sys.modules, 'numpy' in sys.modules)"
    out = run([sys.executable, "-c", code])
    numpy = importlib.util.find_spec("numpy") is not None
    assert out.stdout.split() == ["False", str(numpy)], out.stdout + out.stderr
    if importlib.util.find_spec("jax") is None:
        assert REASON is not None and REASON.endswith(tpu.INSTALL)
    for fn in SUBJECTS:
        assert Impl(fn.__name__, fn).why_unavailable() == REASON
        assert shipped(f"engines.tpu_inference.subjects.sampler:{fn.__name__}")
        assert shipped(f"engines.tpu_inference_sampler:{fn.__name__}")  # the name committed repro files record


def test_the_subjects_declare_their_masks_noise_and_paths():
    classic, distributed = SUBJECTS
    assert classic.masks == distributed.masks == ("top_k", "top_p") and classic.noise_key == "step"
    assert classic.noise is tpu.classic_noise and not hasattr(distributed, "noise")
    assert distributed.draws_from_candidates and not getattr(classic, "draws_from_candidates", False)
    assert distributed.noise_key == "candidate position"
    module, _, name = distributed.classic_path.partition(":")
    assert getattr(importlib.import_module(module), name) is classic


def test_bad_input_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="ids"):
        tpu.classic_noise(torch.zeros(2, dtype=torch.int64), torch.tensor([2.0, 0.0]))
    with pytest.raises(ValueError, match="seeds"):
        tpu.step_seed(torch.zeros(2, 2, dtype=torch.int64))


def test_the_step_seed_is_a_pure_function_of_every_rows_seed():
    seeds = torch.tensor([3, -(2**63), 2**63 - 1])
    assert tpu.step_seed(seeds) == tpu.step_seed(seeds.clone()) < 2**32
    assert tpu.step_seed(seeds) != tpu.step_seed(seeds.flip(0))


def _params(batch: int, top_k: int = 0) -> SamplingParams:
    seeds = torch.arange(batch, dtype=torch.int64) * 7919 - 2**40
    return SamplingParams(torch.ones(batch), torch.full((batch,), top_k), torch.ones(batch), seeds)


@needs_jax
@pytest.mark.parametrize(("batch", "vocab", "tp"), [(1, 24, 1), (4, 64, 2), (3, 50, 4), (8, 600, 8)])
def test_classic_noise_reproduces_the_classic_paths_tokens(batch, vocab, tp):
    """argmax(x + classic_noise), first maximum, is the classic path's token on every row, padded or not."""
    logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(vocab)) * 3
    params = _params(batch)
    seed = tpu.step_seed(params.seed)
    tokens, path = tpu.sample(logits, params.temperature, params.top_k, params.top_p, seed, tp, False)
    want = (logits + tpu.classic_noise(params.seed, torch.arange(vocab))).argmax(dim=1)
    assert path == "classic" and torch.equal(tokens, want)
    out = sample_on_logits(subjects.tpu_inference_classic, logits, tp, params, 120.0)
    assert torch.equal(out[0][0], want) and torch.equal(
        classic_sample(logits, params, noise=tpu.classic_noise).tokens, want
    )


@needs_jax
def test_the_distributed_subject_reports_the_sharded_path_on_a_batch_it_takes():
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    out = sample_on_logits(subjects.tpu_inference_distributed, logits, 2, _params(4, top_k=3), 120.0)
    assert all(torch.equal(o[0], out[0][0]) for o in out)
    assert out[0][3] == ("tpu-inference: distributed",) * 4
    wide = sample_on_logits(subjects.tpu_inference_distributed, logits, 2, _params(4, top_k=0), 120.0)
    assert wide[0][3][0] == "tpu-inference: classic: a row the sharded path does not take"
