"""``tpargmax throughput --compare REV``: README's test command at REV and at HEAD, each from a fresh clone.

Machines of one kind differ by more than twice, so a suite time means something only beside another commit's,
measured on the same machine in the same hour.  Each commit is cloned afresh and set up with its own README's
setup command; then its own README's test command runs with ``--hypothesis-show-statistics`` appended (to count
the examples), the two commits' runs interleaved so both see the same machine state.  One table row per commit:
tests (every outcome in pytest's final summary: passed, failed, skipped, xfailed, xpassed, errors), examples
(the sum of every "- N passing" line of Hypothesis's statistics), each run's wall seconds and their median, and
examples per second of the median.  It imports neither torch nor Hypothesis: ``scripts/under_load.py`` runs
with the system Python and takes ``readme_commands`` from here.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tpargmax import ROOT

STATISTICS = "--hypothesis-show-statistics"
# properties.harness.coverage.EVENTS_ENV, named here so this module needs no torch: the statistics are read for their
# counts, so the case features (one event per example) are left off, as `tpargmax throughput` leaves them off
EVENTS_ENV = "TPARGMAX_FEATURE_EVENTS"
_README_BLOCK = re.compile(r"```bash\n(.+?)\n(.+?)\n```")
_SUMMARY = re.compile(r"\bin [\d.]+s\b")
_OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)\b")
_PASSING = re.compile(r"^\s*- (\d+) passing\b", re.M)


def readme_commands(checkout: Path) -> tuple[str, str]:
    """README's first two commands: setup, then the test command (the first lines of its first ```bash block)."""
    found = _README_BLOCK.search((checkout / "README.md").read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"{checkout / 'README.md'} has no ```bash block of two commands")
    setup, test = found.groups()
    return setup, test


@dataclass
class Run:
    """One timed run of the test command."""

    returncode: int
    seconds: float
    tests: int
    examples: int
    summary: str  # pytest's final summary line, without its rule of '='
    tail: str = ""  # the output's end, shown when the run failed


def parse_output(output: str) -> tuple[int, int, str]:
    """Tests (every outcome of pytest's last summary line), examples (every "- N passing" summed), that line."""
    summary = ""
    for line in reversed(output.splitlines()):
        text = line.strip().strip("=").strip()
        if _SUMMARY.search(text) and (_OUTCOME.search(text) or text.startswith("no tests ran")):
            summary = text
            break
    tests = sum(int(n) for n, _ in _OUTCOME.findall(summary))
    examples = sum(int(n) for n in _PASSING.findall(output))
    return tests, examples, summary


@dataclass
class Commit:
    """A commit under comparison: how the table names it, where it is checked out, and its runs."""

    sha: str
    short: str
    label: str  # "HEAD", the revision as given, or "" where that is the sha itself
    runs: list[Run] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.short} ({self.label})" if self.label else self.short


def _spread(values: list[int]) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def table(commits: list[Commit]) -> str:
    """The markdown table: one row per commit; wall lists each run's seconds, then their median."""
    lines = ["| commit | tests | examples | wall | examples/s |", "|---|---|---|---|---|"]
    for commit in commits:
        runs = commit.runs
        if not runs:
            lines.append(f"| {commit.name} | – | – | not run | – |")
            continue
        walls = [run.seconds for run in runs]
        median = statistics.median(walls)
        wall = f"{walls[0]:.0f} s"
        if len(walls) > 1:
            wall = f"{', '.join(f'{s:.0f}' for s in walls)} s (median {median:.0f}, {len(walls)} runs)"
        examples = [run.examples for run in runs]
        rate = statistics.median(examples) / median if median > 0 else 0.0
        lines.append(
            f"| {commit.name} | {_spread([run.tests for run in runs])} | {_spread(examples)} | {wall} | {rate:,.0f} |"
        )
    return "\n".join(lines)


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd}: {done.stderr.strip()}")
    return done.stdout.strip()


def _commit(repo: Path, rev: str) -> Commit:
    sha = _git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")
    label = "" if re.fullmatch(r"[0-9a-fA-F]{4,40}", rev) and sha.startswith(rev.lower()) else rev
    return Commit(sha=sha, short=_git(repo, "rev-parse", "--short", sha), label=label)


def _tail(done: subprocess.CompletedProcess) -> str:
    return (done.stdout or "")[-3000:] + (done.stderr or "")[-2000:]


def _time(commit: Commit, checkout: Path, test: str, env: dict[str, str]) -> Run:
    start = time.monotonic()
    done = subprocess.run(f"{test} {STATISTICS}", shell=True, cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    tests, examples, summary = parse_output(done.stdout)
    run = Run(done.returncode, seconds, tests, examples, summary or "(no pytest summary)", _tail(done))
    commit.runs.append(run)
    return run


def compare(rev: str, runs: int = 1, repo: Path = ROOT) -> int:
    """Clone and set up REV and HEAD, time README's test command at each ``runs`` times, interleaved; print the table.

    Exit status 1 if a setup or a run failed (any nonzero pytest exit, 5 for no tests included), each named.
    """
    repo = Path(repo).resolve()
    try:
        commits = [_commit(repo, rev), _commit(repo, "HEAD")]
    except RuntimeError as error:
        print(f"tpargmax throughput: {error}", file=sys.stderr)
        return 1
    commits[1].label = "HEAD"  # the committed HEAD: uncommitted changes are not in a clone
    env = {**os.environ, EVENTS_ENV: "off"}
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tpargmax-compare-") as tmp:
        checkouts: list[tuple[Commit, Path, str]] = []
        for i, commit in enumerate(commits):
            checkout = Path(tmp) / f"{i}-{commit.short}"
            try:
                _git(Path(tmp), "clone", "-q", str(repo), str(checkout))
                _git(checkout, "checkout", "-q", commit.sha)
                setup, test = readme_commands(checkout)
            except (RuntimeError, ValueError, OSError) as error:
                print(f"tpargmax throughput: {commit.name}: {error}", file=sys.stderr)
                return 1
            print(f"{commit.name}: fresh clone in {checkout}; setup: {setup}", flush=True)
            start = time.monotonic()
            done = subprocess.run(setup, shell=True, cwd=checkout, capture_output=True, text=True)
            print(f"  exit {done.returncode} in {time.monotonic() - start:.0f} s", flush=True)
            if done.returncode != 0:
                print(_tail(done), flush=True)
                print(f"tpargmax throughput: setup of {commit.name} failed: exit {done.returncode}", file=sys.stderr)
                return 1
            checkouts.append((commit, checkout, test))
        for n in range(1, runs + 1):
            for commit, checkout, test in checkouts:
                run = _time(commit, checkout, test, env)
                what = f"run {n} of {runs} at {commit.name}"
                print(f"{what}: exit {run.returncode}, {run.seconds:.0f} s wall: {run.summary}", flush=True)
                if run.returncode != 0:
                    print(run.tail, flush=True)
                    failures.append(f"{what} failed: pytest exit {run.returncode}: {run.summary}")
    test_commands = {test for _, _, test in checkouts}
    print(f"\nREADME's test command{'s' if len(test_commands) > 1 else ''}, with {STATISTICS} appended:")
    for command in sorted(test_commands):
        print(f"  {command}")
    print()
    print(table(commits))
    for failure in failures:
        print(f"tpargmax throughput: {failure}", file=sys.stderr)
    return 1 if failures else 0
