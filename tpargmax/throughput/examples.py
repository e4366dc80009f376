"""``tpargmax throughput``: examples per second of every property, per backend (a benchmark, not a test).

It runs every property file (``properties/test_*.py``) in one pytest process without xdist, under the ``ci``
profile (each backend's share of its examples), and reads Hypothesis's own statistics: examples and seconds per
test, and its typical runtime per example, of which data generation.  A property's parametrizations on one
backend (its implementations, its heads) add up to one row; a test whose id names no backend is counted under
``-``.  The figures depend on the machine and its load; nothing asserts them.  ``--compare REV`` instead times
README's test command at REV and at HEAD (``tpargmax.throughput.compare``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tpargmax import ROOT
from tpargmax.fuzz.stats import StatisticsReader, TestStats

NO_BACKEND = "-"


def property_files(root: Path = ROOT) -> list[str]:
    """Every property file, relative to the checkout, in a stable order."""
    return sorted(path.relative_to(root).as_posix() for path in (root / "properties").glob("test_*.py"))


def command(args: argparse.Namespace, root: Path = ROOT) -> list[str]:
    """The pytest command line: every property file, one process, the ci profile, the statistics shown."""
    cmd = [sys.executable, "-m", "pytest", *property_files(root), "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    cmd += ["--hypothesis-profile", "ci", "--hypothesis-show-statistics", "--backend", args.backend]
    for option in ("impl", "topk_impl", "sampling_impl"):  # the suite's options; unset ones keep their defaults
        if (value := getattr(args, option, None)) is not None:
            cmd += [f"--{option.replace('_', '-')}", value]
    if getattr(args, "k", None):
        cmd += ["-k", args.k]
    return cmd


def property_and_backend(test_id: str, backends: tuple[str, ...]) -> tuple[str, str]:
    """``properties/f.py::test_x[vllm_pairs-sim]`` -> (``test_x``, ``sim``): the backend is the id's backend part."""
    name, _, params = test_id.split("::")[-1].partition("[")
    found = [part for part in params.rstrip("]").split("-") if part in backends]
    return name, found[-1] if found else NO_BACKEND


def per_property(tests: dict[str, TestStats], backends: tuple[str, ...]) -> dict[tuple[str, str], TestStats]:
    """Each (property, backend)'s examples and seconds summed over its tests; the first test's typical runtime."""
    rows: dict[tuple[str, str], TestStats] = {}
    for test, s in tests.items():
        row = rows.setdefault(property_and_backend(test, backends), TestStats(runtime=s.runtime))
        row.examples += s.examples
        row.seconds += s.seconds
    return rows


def _rate(s: TestStats) -> str:
    return f"{s.examples / s.seconds:>8.0f}" if s.seconds > 0 else f"{'-':>8}"


def render(rows: dict[tuple[str, str], TestStats]) -> str:
    """The printed table: one line per property and backend, then one per backend over every property."""
    width = max([32, *(len(name) + 2 for name, _ in rows)])
    lines = [
        f"{'property':<{width}}{'backend':<9}{'examples':>9}{'seconds':>9}{'per s':>8}  typical runtime per example"
    ]
    per_backend: dict[str, TestStats] = defaultdict(TestStats)
    for (name, backend), s in rows.items():
        lines.append(f"{name:<{width}}{backend:<9}{s.examples:>9}{s.seconds:>9.2f}{_rate(s)}  {s.runtime}")
        per_backend[backend].examples += s.examples
        per_backend[backend].seconds += s.seconds
    for backend, s in per_backend.items():
        lines.append(f"{'all properties':<{width}}{backend:<9}{s.examples:>9}{s.seconds:>9.2f}{_rate(s)}")
    return "\n".join(lines)


def throughput(args: argparse.Namespace) -> int:
    if getattr(args, "compare", None):
        from tpargmax.throughput.compare import compare

        return compare(args.compare, runs=args.runs, repo=Path(args.repo) if args.repo else ROOT)
    from properties.harness.coverage import EVENTS_ENV
    from properties.harness.runner import BACKENDS

    cmd = command(args)
    print(f"running: {shlex.join(cmd[1:])}", flush=True)
    env = {**os.environ, EVENTS_ENV: "off"}  # it reads the statistics for their timings, not the case features
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    stats = StatisticsReader()
    for line in proc.stdout.splitlines():
        stats.feed(line)
    if proc.returncode != 0 or not stats.tests:
        print(proc.stdout[-3000:] + proc.stderr[-2000:], file=sys.stderr)
        print(f"tpargmax throughput: pytest exited with status {proc.returncode}", file=sys.stderr)
        return 1
    print("\n" + render(per_property(stats.tests, BACKENDS)))
    return 0
