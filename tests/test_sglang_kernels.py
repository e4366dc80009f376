"""SGLang 0.5.23's kernels under test: they come from the installed wheel, and a few fixed cases run through
the simulated group (and one through gloo) against the oracle.

Needs ``tpargmax install-sglang``, Triton, and CUDA or ``TRITON_INTERPRET=1`` (the interpreter is slow: the
cases are small); otherwise the module is skipped with the reason.  tests/test_sglang.py needs none of it.
"""

from __future__ import annotations

import importlib.metadata
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engines.sglang.wheel import kernels as sglang
from engines.sglang.wheel.kernels import HEAD, sglang_classic, sglang_deferred_argmax, why_unavailable

REASON = why_unavailable()
if REASON:
    pytest.skip(REASON, allow_module_level=True)
PROJECT = Path(__file__).resolve().parent.parent
SUBJECTS = {"sglang_deferred_argmax": sglang_deferred_argmax, "sglang_classic": sglang_classic}

# Cases on the subjects' head (fp32, soft cap 30, base ids only): ties across and within shards and on a shard
# boundary, padding holding the row's maximum, padding-only ranks, saturated caps, signed zeros, tp 1 to 8.
CASES = [
    dict(batch=4, hidden=4, vocab=7, tp=2, bias=True, specials=("all_negative",)),
    dict(batch=4, hidden=4, vocab=7, tp=8, padding="above_max"),
    dict(batch=8, hidden=6, vocab=1000, tp=4, ties=("across_ranks",), seed=1),
    dict(batch=8, hidden=6, vocab=1000, tp=4, ties=("within_shard",), seed=2),
    dict(batch=8, hidden=6, vocab=200, tp=2, ties=("shard_boundary",), padding="copy_max", seed=3),
    dict(batch=4, hidden=5, vocab=500, tp=4, ties=("softcap_saturation",), seed=4),
    dict(batch=4, hidden=5, vocab=500, tp=4, bias=True, specials=("signed_zero", "huge"), seed=5),
    dict(batch=3, hidden=4, vocab=9000, tp=1, weights="normal", padding="nan", seed=6),  # 3 blocks of 4096
]
# SGLang 0.5.23's finding: one NaN logit (id 32, the only token on rank 1).  The classic path returns it, as
# torch.argmax does; the deferred argmax never takes a NaN (the kernel keeps a block only if its max is
# ``> best``), so rank 0's finite maximum, id 2, wins.
NAN_CASE = dict(batch=1, hidden=3, vocab=33, tp=2, bias=True, specials=("nan_ranks",))


def _case(**fields: object):
    from properties.cases.case import Case

    return replace(Case(**fields), **HEAD)


def _inputs(fields: dict, backend: str = "sim"):
    from properties.cases.tensors import build

    inputs = replace(build(_case(**fields)), backend=backend)
    # Compiled kernels take CUDA tensors alone (the interpreter, any): the simulated group's ranks share the GPU.
    return inputs.on("cuda") if torch.cuda.is_available() and backend == "sim" else inputs


def _impl(name: str):
    from sharded.impls import Impl

    return Impl(f"engines.sglang.wheel.kernels:{name}", SUBJECTS[name])


def test_kernels_are_the_wheels_files() -> None:
    """Executed from the installed distribution's own files, under private names, without importing sglang."""
    kernels = sglang.load_kernels()
    dist_root = Path(importlib.metadata.distribution("sglang").locate_file("")).resolve()
    for module, rel in ((kernels.row_argmax, sglang.KERNEL_FILES["softcap_row_argmax"]), (kernels.softcap, None)):
        path = Path(module.__file__).resolve()
        assert path.is_relative_to(dist_root)  # the wheel's, wherever it is installed (README's venv: in the checkout)
        assert not any(path.is_relative_to(PROJECT / package) for package in ("engines", "sharded", "tests"))
        assert rel is None or path.as_posix().endswith(rel)
        assert not module.__name__.startswith("sglang")
    assert callable(kernels.row_argmax.softcap_row_argmax) and callable(kernels.softcap.gathered_softcap_logits)
    assert "sglang" not in sys.modules  # the package's __init__ (and its dependencies) never ran


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_subjects_call_the_real_kernels(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = sglang.load_kernels()
    if name == "sglang_classic":
        module, attr = kernels.softcap, "gathered_softcap_logits"
    else:
        module, attr = kernels.row_argmax, "softcap_row_argmax"
    real, calls = getattr(module, attr), []
    monkeypatch.setattr(module, attr, lambda *a: calls.append(a) or real(*a))
    from properties.harness.runner import run_ranks

    inputs = _inputs(CASES[2])
    run_ranks(_impl(name), inputs)
    assert len(calls) == inputs.tp


@pytest.mark.parametrize("fields", CASES, ids=lambda f: f"v{f['vocab']}-tp{f['tp']}")
@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_fixed_cases_match_the_oracle(name: str, fields: dict) -> None:
    from properties.argmax.checks import check_output_contract, check_token_exact

    inputs = _inputs(fields)
    check_token_exact(_impl(name), inputs)
    check_output_contract(_impl(name), inputs)


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_runs_in_gloo_rank_processes(name: str) -> None:
    if torch.cuda.is_available():
        pytest.skip("gloo cannot all-gather CUDA tensors")
    from properties.argmax.checks import check_token_exact

    check_token_exact(_impl(name), _inputs(CASES[4], backend="gloo"))


def test_a_nan_logit_never_wins_the_deferred_argmax() -> None:
    """The finding, pinned: SGLang's two paths disagree on a row holding a NaN (rule 2: the first NaN wins)."""
    from properties.harness.runner import run_ranks
    from properties.oracle import answer

    inputs = _inputs(NAN_CASE)
    assert answer(inputs).tokens.tolist() == [32]
    assert run_ranks(_impl("sglang_classic"), inputs)[0][0].tolist() == [32]
    assert run_ranks(_impl("sglang_deferred_argmax"), inputs)[0][0].tolist() == [2]
