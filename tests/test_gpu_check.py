"""``scripts/gpu_check`` on a CPU: it refuses in one line, and its page is a function of its JSON alone."""

from __future__ import annotations

import sys

import pytest
import torch

from engines.versions import SGLANG_VERSION
from sharded.impls import OPTIONAL, load_impl, why_unavailable
from tests.suite import ROOT, run
from tpargmax.gpu_check import TRAP, render, runs, trap_caught


def _row(name: str, kind: str, where: str, cells: dict, **more) -> dict:
    return {
        "name": name,
        "kind": kind,
        "note": "n",
        "where": where,
        "option": ["--impl", name],
        "seconds": 3,
        "cells": cells,
        **more,
    }


FAILED = {
    "outcome": "failed",
    "skip_reason": None,
    "failures": [
        {
            "rule": "float32 logits from a TF32 matmul: rule 1 computes them in full float32 (TF32 off)",
            "case": "Case(batch=8, hidden=256, vocab=4096, tp=2)",
            "repro_file": "repro/gpu/x.json",
            "details": ["row 0: expected token 7"],
        }
    ],
}
PASSED = {"outcome": "passed", "skip_reason": None, "failures": []}
DATA = {
    "title": "The suite on a GPU",
    "command": "scripts/gpu_check",
    "seconds": 300,
    "environment": {"device": "1 x NVIDIA H200", "driver": "580", "cuda": "13.0", "torch": "2.11.0"},
    "budget": {"examples": 60, "profile": "ci (derandomised)"},
    "rows": [
        _row("packed_key", "built-in", "simulated group", {"test_token_exact": PASSED}),
        _row(TRAP, "broken on purpose", "simulated group", {"test_token_exact": FAILED}),
        _row("packed_key", "built-in", "NCCL group, tp 1", {"test_token_exact": PASSED}),
        _row("sglang_classic", f"SGLang {SGLANG_VERSION}", "simulated group", {}, skipped="install it"),
    ],
    "kernel_tests": {"summary": "26 passed in 9.1s", "failed": [], "status": 0},
    "benchmark": [{"B": 1, "tp": 1, "cap": "off", "floor": 0.14, "triton_key": 9.5}],
}


def test_the_page_holds_every_row_failure_and_the_benchmark():
    page = render(DATA)
    for words in (
        "| device | 1 x NVIDIA H200 |",
        "## On the simulated group",
        "## On the NCCL group, tp 1",
        "Not run: `sglang_classic` (install it)",
        f"TF32 trap (`{TRAP}`): caught, for its rule.",
        "### F1: `tests.broken:tf32_matmul`, token-exact",
        "- **Replay:** `tpargmax repro repro/gpu/x.json`",
        "| B | tp | cap | floor | triton_key |",
        "`pytest tests/test_triton_key.py tests/test_sglang_kernels.py`: 26 passed in 9.1s",
    ):
        assert words in page, words
    assert trap_caught(DATA)


def test_every_subject_has_a_row():
    names = [s.spec for run_, _, _ in runs(1, None, None) for s in run_.subjects]
    for name in (
        "packed_key",
        "vllm_pairs",
        "classic_gather",
        "triton_key",
        "topk_pairs",
        "sglang_deferred_argmax",
        "sglang_classic",
        TRAP,
    ):
        assert name in names
    assert [w for _, w, _ in runs(1, None, None)][-1] == "torchrun:1"  # one GPU: NCCL at tp=1 only


@pytest.mark.parametrize("name", sorted(OPTIONAL))
def test_an_optional_builtin_says_what_it_needs_in_one_line(name):
    """Without Triton, a GPU or SGLang's wheel, naming the built-in is a ValueError that says what is missing."""
    why = why_unavailable(name)
    if why is None:
        pytest.skip(f"{name} runs here")
    assert "\n" not in why and ("Triton" in why or "install" in why or "CUDA" in why), why
    with pytest.raises(ValueError, match=rf"--impl {name}: "):
        load_impl(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_refuses_in_one_line():
    done = run([sys.executable, str(ROOT / "scripts" / "gpu_check")])
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "needs a CUDA device" in done.stderr, done.stderr
