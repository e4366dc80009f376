"""Run README's test command several times in a row from a fresh clone, with a CPU core kept busy.

    python3 scripts/under_load.py [--runs 5] [--busy 1] [--limit 180] [--repo .]

It clones the repository's committed HEAD into a temporary directory, runs
README's setup command there once, starts ``--busy`` competing processes that
each keep a core busy, then runs README's test command ``--runs`` times and
reports each run's exit status, wall time and pytest's summary line.  The exit
status is 1 if any run failed or took longer than ``--limit`` seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: the system Python has no install
from tpargmax.throughput.compare import readme_commands  # noqa: E402 - torch-free, shared with throughput --compare

BUSY = "while True: pass"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy", type=int, default=1, help="competing busy processes (default %(default)s)")
    parser.add_argument("--limit", type=float, default=180.0, help="seconds a run may take (default %(default)s)")
    parser.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent), help="repository to clone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tpargmax-under-load-") as tmp:
        checkout = Path(tmp) / "tpargmax"
        subprocess.run(["git", "clone", "-q", args.repo, str(checkout)], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
        setup, test = readme_commands(checkout)
        print(f"fresh clone of {args.repo} at {head.stdout.strip()} in {checkout}", flush=True)
        start = time.monotonic()
        done = subprocess.run(setup, shell=True, cwd=checkout, capture_output=True, text=True)
        print(f"setup: {setup}\n  exit {done.returncode} in {time.monotonic() - start:.0f} s", flush=True)
        if done.returncode != 0:
            print(done.stdout[-2000:] + done.stderr[-2000:])
            return 1
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
        results = []
        try:
            print(f"{args.busy} busy process(es) running; test command: {test}", flush=True)
            for run in range(1, args.runs + 1):
                start = time.monotonic()
                out = subprocess.run(test, shell=True, cwd=checkout, capture_output=True, text=True)
                seconds = time.monotonic() - start
                summary = (out.stdout.strip().splitlines() or ["(no output)"])[-1].strip("= ")
                results.append((out.returncode, seconds))
                print(f"run {run}: exit {out.returncode}, {seconds:.0f} s wall: {summary}", flush=True)
                if out.returncode != 0:
                    print(out.stdout[-4000:] + out.stderr[-2000:], flush=True)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
    green = sum(code == 0 for code, _ in results)
    slow = sum(seconds > args.limit for _, seconds in results)
    slowest = max(seconds for _, seconds in results)
    print(f"{green} of {len(results)} runs green; {slow} over {args.limit:.0f} s; slowest {slowest:.0f} s")
    return 0 if green == len(results) and not slow else 1


if __name__ == "__main__":
    sys.exit(main())
