"""Run the suite in a subprocess, as a user would from the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    """``cmd`` in the checkout, without the caller's TPARGMAX_* settings.

    Repro files and any example database go to a temporary directory, removed afterwards, so that a run
    neither litters the checkout nor depends on what earlier runs left there.
    """
    with tempfile.TemporaryDirectory(prefix="tpargmax-test-") as tmp:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TPARGMAX_")},
            "TPARGMAX_REPRO_DIR": os.path.join(tmp, "repro"),
            "TPARGMAX_DB": os.path.join(tmp, "examples"),
            **env,
        }
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def run_suite(*args: str, profile: str | None = "ci", **env: str) -> subprocess.CompletedProcess:
    """``python -m pytest -p no:xdist -q ARGS``; the ``ci`` profile is derandomised and has no example database,
    so what the run finds does not depend on a seed."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", *args]
    if profile:
        cmd += ["--hypothesis-profile", profile]
    return run(cmd, **env)
