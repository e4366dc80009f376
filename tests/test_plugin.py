"""A user's implementation plugs in with --impl, as README shows: correct passes, wrong fails clearly."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_suite(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TPARGMAX_IMPL"}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "--hypothesis-profile", "dev", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_readme_example_implementation_passes():
    out = run_suite("--impl", "examples.float64_pairs:local_argmax", "properties")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_a_wrong_implementation_fails_with_rule_case_and_replay():
    out = run_suite("--impl", "tests.broken:highest_rank_wins", "properties/test_equivalence.py", "-k", "token_exact")
    assert out.returncode == 1, out.stdout[-3000:]
    assert "[tie across ranks resolved to the higher rank]" in out.stdout
    assert "replay: python -m properties.replay --impl tests.broken:highest_rank_wins" in out.stdout
    replay = shlex.split(out.stdout.rsplit("replay: ", 1)[1].splitlines()[0])
    assert replay[:3] == ["python", "-m", "properties.replay"]
    again = subprocess.run([sys.executable, *replay[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "tie across ranks resolved to the higher rank" in again.stdout, again.stdout


def test_unknown_impl_is_a_usage_error():
    out = run_suite("--impl", "no_such_module:fn", "properties/test_equivalence.py")
    assert out.returncode == 4
    assert "--impl 'no_such_module:fn': cannot load it" in out.stderr
