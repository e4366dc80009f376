"""``tpargmax throughput``: examples per second of the core properties, per backend (a benchmark, not a test).

It runs the core properties in one pytest process without xdist, under the
``ci`` profile (each backend's share of its examples), and reads Hypothesis's
own statistics: examples and seconds per test, and its typical runtime per
example, of which data generation.  The figures depend on the machine and its
load; nothing asserts them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from properties.coverage import EVENTS_ENV
from tpargmax.stats import StatisticsReader, TestStats

ROOT = Path(__file__).resolve().parent.parent
CORE = (
    "properties/test_equivalence.py",
    "properties/test_input_errors.py::test_rejects_bad_input",
    "properties/test_top_k.py",
)


def throughput(args: argparse.Namespace) -> int:
    cmd = [sys.executable, "-m", "pytest", *CORE, "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    cmd += [
        "--hypothesis-profile",
        "ci",
        "--hypothesis-show-statistics",
        "--impl",
        args.impl,
        "--backend",
        args.backend,
    ]
    print(f"running: {' '.join(cmd[1:])}", flush=True)
    env = {**os.environ, EVENTS_ENV: "off"}  # it reads the statistics for their timings, not the case features
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    stats = StatisticsReader()
    for line in proc.stdout.splitlines():
        stats.feed(line)
    if proc.returncode != 0 or not stats.tests:
        print(proc.stdout[-3000:] + proc.stderr[-2000:], file=sys.stderr)
        print(f"tpargmax throughput: pytest exited with status {proc.returncode}", file=sys.stderr)
        return 1
    print(f"\n{'property':<32}{'backend':<9}{'examples':>9}{'seconds':>9}{'per s':>8}  typical runtime per example")
    per_backend: dict[str, TestStats] = defaultdict(TestStats)
    for test, s in stats.tests.items():
        name, _, params = test.split("::")[1].partition("[")
        backend = params.rstrip("]").rsplit("-", 1)[-1]
        print(f"{name:<32}{backend:<9}{s.examples:>9}{s.seconds:>9.2f}{s.examples / s.seconds:>8.0f}  {s.runtime}")
        per_backend[backend].examples += s.examples
        per_backend[backend].seconds += s.seconds
    for backend, s in per_backend.items():
        rate = s.examples / s.seconds
        print(f"{'all core properties':<32}{backend:<9}{s.examples:>9}{s.seconds:>9.2f}{rate:>8.0f}")
    return 0
