"""``tpargmax coverage``: which pairs of case features the ``ci`` run's properties draw and check.

It runs the properties as README's test command does (``-n auto``, ``ci``
profile), with every example's features recorded (:mod:`properties.harness.coverage`),
then counts each valid pair of features.  Exit 0 when every valid pair met in at
least ``--min`` examples, 1 when some did not, 2 when the run recorded nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from properties.harness.coverage import COVERAGE_ENV, count_pairs, read, valid_pairs
from tpargmax import ROOT

Popen = subprocess.Popen  # what starts the pytest run; the project's tests fork it (tests/forked_runs.py)


def pair_name(pair: frozenset[str]) -> str:
    return " & ".join(sorted(pair))


def coverage(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="tpargmax-coverage-") as tmp:
        cmd = [sys.executable, "-m", "pytest", "properties", "-q", "-p", "no:cacheprovider", "-n", args.workers]
        cmd += ["--hypothesis-profile", "ci", "--backend", args.backend]
        cmd += ["--impl", args.impl] if args.impl else []
        cmd += ["-k", args.k] if args.k else []
        cmd += ["--max-examples", str(args.max_examples)] if args.max_examples else []
        env = {**os.environ, COVERAGE_ENV: tmp, "TPARGMAX_REPRO_DIR": os.path.join(tmp, "repro")}
        print(f"running: {' '.join(cmd[1:])}", flush=True)
        with Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            output = proc.stdout.read()
        examples = read(tmp)
    if not examples:
        print(output[-5000:], file=sys.stderr)
        print(f"tpargmax coverage: the run recorded no example (pytest exited {proc.returncode})", file=sys.stderr)
        return 2
    singles, met = count_pairs(examples)
    pairs = valid_pairs()
    thin = sorted((met[p], pair_name(p)) for p in pairs if met[p] < args.min)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            counts = {pair_name(p): met[p] for p in pairs}
            json.dump({"examples": len(examples), "features": dict(singles), "pairs": counts}, fh, indent=1)
    status = "green" if proc.returncode == 0 else f"exit {proc.returncode}: some property failed"
    print(f"\n{len(examples)} examples recorded (pytest {status})\n")
    print(f"{'feature':<36}{'examples':>9}")
    for feature, count in sorted(singles.items()):
        print(f"{feature:<36}{count:>9}")
    fewest = min(met[p] for p in pairs)
    print(f"\n{len(pairs)} valid pairs of features; the fewest examples a pair met in: {fewest}")
    never = [name for count, name in thin if count == 0]
    print(f"pairs that never met: {len(never)}")
    for name in never:
        print(f"  {name}")
    print(f"pairs below {args.min} examples: {len(thin)}")
    for count, name in thin:
        if count:
            print(f"  {count:>4}  {name}")
    return 1 if thin else 0
