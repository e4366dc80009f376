"""The opt-in install commands' one loop: print each step, run it unless ``--dry-run``, stop at the first failure."""

from __future__ import annotations

import shlex
import subprocess
import sys


def run_steps(command: str, steps: list[list[str]], dry_run: bool, check: str = "", cwd: str | None = None) -> int:
    """Run ``steps`` for ``tpargmax COMMAND``; a ``python -c`` step is shown as ``check`` where one is given."""
    for step in steps:
        shown = [*step[:2], check] if check and step[1] == "-c" else step
        print("$ " + shlex.join(shown), flush=True)
        if dry_run:
            continue
        if subprocess.run(step, cwd=cwd).returncode != 0:
            print(f"tpargmax {command}: this step failed: {shlex.join(shown)}", file=sys.stderr)
            return 1
    return 0
