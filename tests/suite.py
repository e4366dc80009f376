"""Run the suite in a subprocess, as a user would from the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_suite(*args: str, profile: str | None = "ci", **env: str) -> subprocess.CompletedProcess:
    """``python -m pytest -p no:xdist -q ARGS`` in the checkout, without the caller's TPARGMAX_* settings.

    The ``ci`` profile is derandomised and has no example database, so what the run finds does not depend on a
    seed or on what earlier runs left behind; repro files and any database go to fresh temporary directories.
    """
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TPARGMAX_")}, **env}
    env.setdefault("TPARGMAX_REPRO_DIR", tempfile.mkdtemp(prefix="tpargmax-test-repro-"))  # keep repro/ clean
    env.setdefault("TPARGMAX_DB", tempfile.mkdtemp(prefix="tpargmax-test-db-"))  # and .hypothesis/
    cmd = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", *args]
    if profile:
        cmd += ["--hypothesis-profile", profile]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
