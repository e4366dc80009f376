"""A planted bug under ``tpargmax fuzz``: non-zero exit, repro files that replay anywhere, a database replayed first."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.suite import ROOT, run_suite


def tpargmax(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tpargmax", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_fuzz_finds_a_planted_bug_and_everything_it_leaves_replays(tmp_path):
    env = {"TPARGMAX_DB": str(tmp_path / "db")}
    repro_dir, log = tmp_path / "repro", tmp_path / "fuzz-log.jsonl"
    out = tpargmax(
        "fuzz",
        "--minutes",
        "0.2",
        "--impl",
        "tests.broken:highest_rank_wins",
        "--repro-dir",
        str(repro_dir),
        "--log",
        str(log),
        "-n",
        "0",
        env=env,
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    assert "FAILED properties/test_equivalence.py::test_token_exact" in out.stdout
    rounds = [json.loads(line) for line in log.read_text().splitlines()]
    assert rounds and all(isinstance(r["seed"], int) for r in rounds)

    files = sorted(repro_dir.glob("test_token_exact-*.json"))
    assert files, sorted(p.name for p in repro_dir.iterdir())
    for backend in ("sim", "gloo"):
        still = tpargmax("repro", str(files[0]), "--backend", backend, env=env)
        assert still.returncode == 1 and "STILL FAILING: [tie across ranks" in still.stdout, still.stdout
        assert "rank 0 won" in still.stdout and "oracle token" in still.stdout
        fixed = tpargmax("repro", str(files[0]), "--backend", backend, "--impl", "vllm_pairs", env=env)
        assert fixed.returncode == 0 and "fixed: the property holds" in fixed.stdout, fixed.stdout

    # the next plain run (dev profile, same database) replays the find before generating anything new
    plain = run_suite(
        "properties/test_equivalence.py",
        "-k",
        "tp_invariance",
        "--backend",
        "sim",
        "--impl",
        "tests.broken:highest_rank_wins",
        "--hypothesis-show-statistics",
        **env,
    )
    assert plain.returncode == 1
    assert "during reuse phase" in plain.stdout and "1 failing" in plain.stdout.split("during reuse phase")[1]
