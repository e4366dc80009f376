"""``tpargmax fuzz``: run the property suite under the nightly profile, round after round, within a budget.

The budget is time (``--minutes``), rounds (``--rounds``) or both, whichever
ends first.  Each round is a pytest run over ``properties/`` with its own seed
(fresh, or drawn from ``--seed`` so that a whole session can be rerun) and an
example budget: ``--examples`` per property, resized each round to fit the
time left when there is a time budget.  Failing tests are printed as they
happen, with a progress line every 10 seconds; each round's seed, examples per
property and failing tests go to a JSON-lines log.  Failures land in the
example database (replayed first by the next pytest run) and as repro files.
The exit status is 1 if any test failed, 2 if the example database cannot be used.

A fleet: ``--shard I/N`` gives worker I the round seeds equal to I - 1 modulo N (disjoint from the others'), and
with ``--shard-by properties`` a disjoint 1/N of the tests too,
``--db redis://...`` one live example database for all of them (:mod:`properties.harness.example_db`), and
``tpargmax fuzz-summary`` merges their logs and repro files (:mod:`tpargmax.fuzz.summary`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from properties.harness import example_db
from properties.harness.fuzz_shards import shard_seed
from tpargmax import ROOT
from tpargmax.fuzz.stats import StatisticsReader

Popen = subprocess.Popen  # what starts a round's pytest; the project's tests fork it (tests/forked_runs.py)
TEST_ID = re.compile(r"(properties/\S+::\S+)")
OUTCOMES = (" PASSED", " FAILED", " ERROR")


def _round(
    args: argparse.Namespace, seed: int, examples: int, deadline: float, totals: Counter[str], failing: set[str]
) -> tuple[int, dict[str, int]]:
    """One pytest run, adding to ``totals`` (examples per test) and ``failing``; returns pytest's exit status and
    the round's examples per test."""
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
        f"({args.k}) and not test_repro_file_replays_clean" if args.k else "not test_repro_file_replays_clean",
    ]  # stored repros are regressions, not fuzz targets
    if args.impl:
        cmd += ["--impl", args.impl]
    if args.shard_by == "properties" and args.shard[1] > 1:
        cmd += ["--shard-tests", "{}/{}".format(*args.shard)]
    proc = Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finished, start, shown, stats = 0, time.monotonic(), time.monotonic(), StatisticsReader()
    for line in proc.stdout:
        stats.feed(line)
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
    counts = {test: s.examples for test, s in stats.tests.items()}
    totals.update(counts)
    try:
        return proc.wait(30), counts
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(), counts


def fuzz(args: argparse.Namespace) -> int:
    if args.db:
        os.environ["TPARGMAX_DB"] = args.db  # the rounds' pytest runs read it (properties.harness.example_db)
    if (why := example_db.problem()) is not None:
        print(f"tpargmax fuzz: {why}", file=sys.stderr)
        return 2
    shard, shards = args.shard
    deadline = time.monotonic() + 60 * args.minutes if args.minutes is not None else float("inf")
    rounds = args.rounds if args.rounds is not None else float("inf")
    seeds = random.Random(args.seed) if args.seed is not None else random.SystemRandom()
    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    totals: Counter[str] = Counter()
    failing: set[str] = set()
    examples, round_no, status, started = args.examples, 0, 0, time.monotonic()
    while round_no < rounds and time.monotonic() < deadline - 5:
        round_no += 1
        seed = shard_seed(seeds.randrange(2**32 // shards), args.shard)
        before, t0 = sum(totals.values()), time.monotonic()
        left = f" ({(deadline - t0) / 60:.1f} min left)" if args.minutes is not None else ""
        worker = f" (worker {shard}/{shards})" if shards > 1 else ""
        print(f"round {round_no}: seed {seed}{worker}, up to {examples} examples per property{left}", flush=True)
        code, counts = _round(args, seed, examples, deadline, totals, failing)
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
                        "shard": f"{shard}/{shards}",
                        "host": socket.gethostname(),
                        "tests": counts,
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
        if args.minutes is not None:  # size the next round to the time left
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
