"""The benchmark command runs end to end on real gloo groups and reports the same bytes the traffic property checks."""

from __future__ import annotations

import sys

from benchmarks.argmax import PATHS, bytes_per_rank
from properties.test_traffic import FORMULAS
from tests.suite import run


def test_bench_prints_a_row_per_cell():
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.argmax",
        "--vocab",
        "1000",
        "--tp",
        "2",
        "--batch",
        "1",
        "4",
        "--dtype",
        "fp32",
        "--reps",
        "3",
        "--png",
        "/nonexistent/chart.png",
    ]
    out = run(cmd)  # forked from a process that imported torch: a fresh start's quiet is tests/test_entry_points.py's
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.strip().startswith("1000")]
    assert len(rows) == 2 and all(len(r.split("|")) == 4 for r in rows), out.stdout
    assert rows[0].endswith("4096       16      8")  # classic, pairs and key bytes for B=1, V_padded=1024
    assert "matplotlib is not installed" in out.stderr or "chart written" in out.stdout


def test_bench_bytes_match_the_checked_formulas():
    for batch, tp, padded, itemsize in [(1, 2, 64, 2), (64, 4, 151936, 4), (256, 8, 262144, 2)]:
        for path in PATHS:
            want = sum(FORMULAS[path](batch, tp, padded, itemsize).values())
            assert bytes_per_rank(path, batch, padded, tp, itemsize) == want
