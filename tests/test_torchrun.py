"""The property suite under torchrun with gloo, 2 ranks: rank 0 draws, both ranks compute."""

from __future__ import annotations

import subprocess
import sys

from tests.suite import run


def torchrun(*args: str) -> subprocess.CompletedProcess:
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
        "ci",
        "--max-examples",
        "20",
        "--collective-timeout",
        "20",
        *args,
    ]
    return run(cmd)


def test_the_suite_runs_on_torchrun_ranks():
    """One job: the built-in local paths pass, and a broken implementation fails for its rule on the job's group."""
    impls = "packed_key,vllm_pairs,tests.broken:highest_rank_wins"
    files = ["properties/test_equivalence.py", "properties/test_top_k.py"]  # argmax and top-k over the job's group
    out = torchrun("--impl", impls, *files, "-k", "not tp_invariance and (not highest_rank_wins or token_exact)")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    # pytest may append the message to each summary line (always under CI): compare the test ids
    failed = [line.split(" - ")[0] for line in out.stdout.splitlines() if line.startswith("FAILED ")]
    assert failed == [f"FAILED properties/test_equivalence.py::test_token_exact[{impls.split(',')[-1]}-torchrun]"]
    assert "[tie across ranks resolved to the higher rank]" in out.stdout
    assert "on the torchrun job's group of tp=2" in out.stdout and " passed" in out.stdout
