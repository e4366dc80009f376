"""``scripts/gpu_check`` on a CPU: it refuses in one line, and its page is a function of its JSON alone."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pytest
import torch

from engines.versions import SGLANG_VERSION
from sharded.impls import OPTIONAL, load_impl, why_unavailable
from tests.suite import ROOT, run
from tpargmax.gpu_check import TRAP, render, runs, trap_caught
from tpargmax.report.runs import run_pytest
from tpargmax.report.subjects import Run, Subject


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


def test_a_failed_kernel_test_keeps_its_reason():
    failed = ["tests/test_triton_key.py::test_x[torch.float32] - AssertionError: scale 1.0, cap 0.001: 3 inputs"]
    data = {**DATA, "kernel_tests": {"summary": "1 failed", "failed": failed, "status": 1}}
    line = "- failed: `tests/test_triton_key.py::test_x[torch.float32]`: AssertionError: scale 1.0, cap 0.001: 3 inputs"
    assert line in render(data)


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
        "gumbel_pairs",
        "candidates",
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


def test_a_row_that_hangs_is_stopped_at_its_limit_with_what_it_started(tmp_path):
    """The row's deadline runs beside the reading of its output: a run that hangs with its output open (and a
    process it started) is stopped at the limit and reported so, not waited on."""
    child = tmp_path / "child.pid"
    hang = (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(child)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(600)\n"
    )
    entries = run_pytest([sys.executable, "-c", hang, "--results-json", str(tmp_path / "r.json")], lambda _: None, 3)
    assert entries[0]["failures"][0]["rule"] == "the pytest run was stopped at its 3 s limit and no results"
    pid = int(child.read_text())
    for _ in range(300):  # killed by the group's SIGKILL: gone once its parent (the init) reaps it
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {pid}, started by the stopped row, outlived it")


@pytest.mark.parametrize(("results", "status"), [("[]", 5), (None, 4)], ids=["empty", "usage-error"])
def test_a_row_that_runs_no_test_says_why(tmp_path, results, status):
    """A run with no results, or an empty list of them (pytest's exit 5, or a usage error after the results were
    set up), is a failed row holding the run's last lines: a row is never lost without a word."""
    out = tmp_path / "r.json"
    script = (
        "import pathlib, sys\n"
        + (f"pathlib.Path({str(out)!r}).write_text({results!r})\n" if results is not None else "")
        + f"print('ERROR: --sampling-impl: no such subject')\nsys.exit({status})\n"
    )
    entries = run_pytest([sys.executable, "-c", script, "--results-json", str(out)], lambda _: None, 60)
    (failure,) = entries[0]["failures"]
    assert failure["rule"] == f"the pytest run ended with status {status} and no results"
    assert failure["details"] == ["ERROR: --sampling-impl: no such subject"]


def test_the_record_is_saved_after_every_row(monkeypatch):
    """A run stopped part way (its job's limit) keeps the rows it finished, on a page that says it is unfinished."""
    from tpargmax import gpu_check

    rows = [(Run((Subject("packed_key", "built-in", "n"),)), "sim", "not here"), *runs(1, None, None)[:1]]
    monkeypatch.setattr(gpu_check, "runs", lambda *_: [(r, w, "not here") for r, w, _ in rows])
    monkeypatch.setattr(gpu_check, "kernel_tests", lambda log: {"summary": "1 passed", "failed": [], "status": 0})
    monkeypatch.setattr(gpu_check, "environment", lambda: {"device": "none"})
    saved: list[dict] = []
    args = argparse.Namespace(examples=1, repro_dir="repro/gpu", row_timeout=1.0, no_bench=True)
    data = gpu_check.build(args, lambda _: None, lambda d: saved.append(json.loads(json.dumps(d))))
    assert [len(d["rows"]) for d in saved] == [1, 1 + len(rows[1][0].subjects), len(data["rows"])]
    assert all(d["unfinished"] for d in saved) and "unfinished" not in data
    assert "**Unfinished:**" in render(saved[0]) and "**Unfinished:**" not in render(data)


def test_sglang_files_pack_small_for_a_gpu_machine(tmp_path, monkeypatch):
    """``--pack-sglang``: the files the subjects load, with the wheel's metadata and RECORD cut to them, which the
    subjects then find as they find an installed wheel's; anything else is refused, naming what is wrong."""
    import zipfile

    from engines.sglang.wheel import kernels
    from engines.sglang.wheel.runtime import FILES, pack

    info = f"sglang-{SGLANG_VERSION}.dist-info/"
    wanted = {**kernels.KERNEL_FILES, **FILES}

    def wheel(name: str, files: list[str]) -> Path:
        with zipfile.ZipFile(tmp_path / name, "w") as out:
            for rel in files:
                out.writestr(rel, "x = 1\n")
            out.writestr(f"{info}METADATA", f"Metadata-Version: 2.1\nName: sglang\nVersion: {SGLANG_VERSION}\n")
            out.writestr(f"{info}licenses/LICENSE", "Apache-2.0\n")
            out.writestr(f"{info}RECORD", "".join(f"{n},,\n" for n in files))
        return tmp_path / name

    packed = pack(wheel(f"sglang-{SGLANG_VERSION}-cp311-cp311-any.whl", [*wanted.values(), "sglang/srt/big.py"]))
    target = tmp_path / "site"
    zipfile.ZipFile(packed).extractall(target)
    assert not (target / "sglang/srt/big.py").exists() and (target / info / "licenses/LICENSE").exists()
    monkeypatch.syspath_prepend(str(target))
    assert set(kernels.kernel_paths(wanted)) == set(wanted)
    (tmp_path / "README.md").write_text("# not a wheel\n")
    short = wheel("short.whl", list(kernels.KERNEL_FILES.values()))
    for bad, words in ((tmp_path / "README.md", "is not a wheel"), (short, f"lacks {FILES['murmur']}, ")):
        with pytest.raises(ValueError, match=words):
            pack(bad)
