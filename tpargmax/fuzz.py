"""``tpargmax fuzz --minutes N``: run the property suite under the nightly profile until the budget ends.

Each round is a pytest run over ``properties/`` with a fresh seed and an example
budget sized to the time left. Failing tests are printed as they happen, with a
progress line every 10 seconds; each round's seed, examples per property and
failing tests go to a JSON-lines log. Failures land in the example database
(replayed first by the next pytest run) and as repro files. The exit status is
1 if any test failed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAT_TEST = re.compile(r"^(properties/\S+::\S+):$")
STAT_COUNT = re.compile(r"^\s+- (\d+) passing, (\d+) failing")
TEST_ID = re.compile(r"(properties/\S+::\S+)")
OUTCOMES = (" PASSED", " FAILED", " ERROR")


def _round(
    args: argparse.Namespace, seed: int, examples: int, deadline: float, totals: Counter[str], failing: set[str]
) -> int:
    """One pytest run, adding to ``totals`` (examples per test) and ``failing``; returns pytest's exit status."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "properties",
        "-v",
        "-p",
        "no:cacheprovider",
        "--hypothesis-profile",
        "nightly",
        f"--fuzz-seed={seed}",  # not --hypothesis-seed, which turns the example database off
        "--max-examples",
        str(examples),
        "--hypothesis-show-statistics",
        "--backend",
        args.backend,
        "--repro-dir",
        args.repro_dir,
        "-n",
        str(args.workers),
        "-k",
        "not test_repro_file_replays_clean",
    ]  # stored repros are regressions
    if args.impl:
        cmd += ["--impl", args.impl]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finished, current, start, shown = 0, None, time.monotonic(), time.monotonic()
    for line in proc.stdout:
        if time.monotonic() > deadline and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # budget spent: let pytest stop and report what it has
            deadline = float("inf")
        if any(o in line for o in OUTCOMES) and (match := TEST_ID.search(line)):
            finished += 1
            if " PASSED" not in line and match.group(1) not in failing:
                failing.add(match.group(1))
                print(f"  FAILED {match.group(1)}", flush=True)
            if time.monotonic() - shown > 10:
                shown = time.monotonic()
                print(f"  [{shown - start:4.0f}s] {finished} tests done; {len(failing)} failing so far", flush=True)
        elif match := STAT_TEST.match(line):
            current = match.group(1)
        elif current and (match := STAT_COUNT.match(line)):
            totals[current] += int(match.group(1)) + int(match.group(2))
            current = None
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def fuzz(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + 60 * args.minutes
    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    totals: Counter[str] = Counter()
    failing: set[str] = set()
    examples, round_no, status, started = 50, 0, 0, time.monotonic()
    while time.monotonic() < deadline - 5:
        round_no += 1
        seed = random.SystemRandom().randrange(2**32)
        before, t0 = sum(totals.values()), time.monotonic()
        print(
            f"round {round_no}: seed {seed}, up to {examples} examples per property "
            f"({(deadline - t0) / 60:.1f} min left)",
            flush=True,
        )
        code = _round(args, seed, examples, deadline, totals, failing)
        took, ran = time.monotonic() - t0, sum(totals.values()) - before
        with log.open("a", encoding="utf-8") as fh:
            fh.write(
                json.dumps(
                    {
                        "round": round_no,
                        "seed": seed,
                        "max_examples": examples,
                        "examples": ran,
                        "seconds": round(took, 1),
                        "failing_tests": sorted(failing),
                        "impl": args.impl,
                        "backend": args.backend,
                        "pytest_status": code,
                    }
                )
                + "\n"
            )
        print(
            f"round {round_no}: {ran} examples in {took:.0f}s ({ran / max(took, 1e-9):.0f}/s); "
            f"failing tests so far: {len(failing)}",
            flush=True,
        )
        if code not in (0, 1, 2):  # 1: tests failed; 2: interrupted at the deadline
            print(f"round {round_no}: pytest exited with status {code}", flush=True)
            status = 1
            break
        left = deadline - time.monotonic()
        examples = max(10, int(examples * min(4.0, max(0.25, min(left / 2, 600) / max(took, 1.0)))))
    elapsed = time.monotonic() - started
    total = sum(totals.values())
    print(
        f"\nfuzzed {elapsed / 60:.1f} min: {round_no} round(s), {total} examples ({total / elapsed:.0f}/s); "
        f"seeds in {log}"
    )
    for test, n in sorted(totals.items()):
        print(f"  {n:>8}  {test}")
    print(f"failing tests: {len(failing)}" + (f"; repro files in {args.repro_dir}/" if failing else ""))
    for test in sorted(failing):
        print(f"  {test}")
    return 1 if failing else status
