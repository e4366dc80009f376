"""The property suite under torchrun with gloo, 2 ranks: rank 0 draws, both ranks compute."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from tests.suite import ROOT


def torchrun(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPARGMAX_")}
    env["TPARGMAX_REPRO_DIR"] = tempfile.mkdtemp(prefix="tpargmax-test-repro-")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "properties.torchrun",
        "-q",
        "--hypothesis-profile",
        "dev",
        "--collective-timeout",
        "20",
        *args,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_suite_passes_on_torchrun_ranks():
    out = torchrun("properties/test_equivalence.py", "properties/test_input_errors.py", "-k", "not tp_invariance")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "passed" in out.stdout and "torchrun]" not in out.stdout  # nothing failed or was skipped by name


def test_a_broken_implementation_fails_on_torchrun_ranks():
    out = torchrun("--impl", "tests.broken:highest_rank_wins", "-k", "token_exact")
    assert out.returncode != 0
    assert "[tie across ranks resolved to the higher rank]" in out.stdout
    assert "on the torchrun job's group of tp=2" in out.stdout


def test_torchrun_backend_needs_torchrun():
    cmd = [sys.executable, "-m", "pytest", "-p", "no:xdist", "--backend", "torchrun", "properties/test_traffic.py"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 4 and "start the suite with torchrun -m properties.torchrun" in out.stderr
