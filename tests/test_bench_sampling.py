"""The sampling benchmark runs end to end on a real gloo group and reports the bytes its formulas give."""

from __future__ import annotations

import sys

from benchmarks.sampling import bytes_per_rank
from tests.suite import run


def test_bench_sampling_counts_the_bytes_of_its_formulas():
    cmd = [sys.executable, "-m", "benchmarks.sampling", "--vocab", "1000", "--tp", "2", "--batch", "1", "4"]
    cmd += ["--candidates", "8", "--reps", "3"]
    out = run(cmd)  # forked from a process that imported torch: a fresh start's quiet is tests/test_entry_points.py's
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split("|") for line in out.stdout.splitlines() if line.strip().startswith("1000")]
    cells = [tuple(r[0].split()) for r in rows]
    assert cells == [
        ("1000", "2", "1", "gumbel_pairs", "-", "0"),
        ("1000", "2", "1", "candidates", "8", "4"),
        ("1000", "2", "4", "gumbel_pairs", "-", "0"),
        ("1000", "2", "4", "candidates", "8", "4"),
    ], out.stdout
    for (_, _, batch, path, c, _), row in zip(cells, rows, strict=True):
        classic, counted = (int(n) for n in row[2].split())
        b, c = int(batch), 0 if c == "-" else int(c)
        assert classic == bytes_per_rank("classic_gather", b, 1024, 2, 2) == b * 2048  # bf16, V_padded 1024
        assert counted == bytes_per_rank(path, b, 1024, 2, 2, c)
        assert row[3].strip() == (f"0/{b}" if c else "-")  # top-k C/2: no row falls back
    assert bytes_per_rank("gumbel_pairs", 1, 1024, 2, 2) == 112  # [1, 7] float64 from each of 2 ranks
    assert bytes_per_rank("candidates", 1, 1024, 2, 2, 8) == 464  # [1, 29] float64 from each of 2 ranks
