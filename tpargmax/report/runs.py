"""One pytest run of a report, bounded: its ``--results-json`` entries, or one failed entry that says why not."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tpargmax import ROOT

TAIL = 15  # lines of a broken run's output its failure keeps


def run_pytest(command: list[str], log, timeout: float, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One pytest run that writes ``--results-json`` (named in ``command``): its results, each test's outcome
    logged as it comes; a run that ends with no results is one failed entry that says so."""
    results = Path(command[command.index("--results-json") + 1])
    started = time.monotonic()
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    environment = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    # Its own process group, so that the deadline stops torchrun's ranks with it; the deadline runs beside the
    # reading: a run that hangs with its output open is stopped, not waited on.
    with subprocess.Popen(command, cwd=ROOT, env=environment, start_new_session=True, **pipe) as proc:
        stopped, tail = threading.Event(), collections.deque(maxlen=TAIL)

        def kill() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        deadline = threading.Timer(timeout, lambda: (stopped.set(), kill()))
        deadline.start()
        try:
            for line in proc.stdout:
                tail.append(line.rstrip())
                word = next((w for w in ("PASSED", "FAILED", "SKIPPED", "ERROR") if f" {w}" in line), None)
                if "::" in line and word:
                    log(f"    {line.split('::', 1)[1].split(' ', 1)[0]}: {word} ({time.monotonic() - started:.0f} s)")
            proc.wait()
        finally:  # interrupted too: nothing it started outlives the report
            deadline.cancel()
            if proc.poll() is None:
                kill()
    entries = [] if stopped.is_set() or not results.exists() else json.loads(results.read_text(encoding="utf-8"))
    if entries and proc.returncode in (0, 1):  # 1: a test failed, and its entry says how
        return entries
    # Stopped, broken (a usage error, a crash) or empty (exit 5): one failed entry with the run's last lines.
    why = f"was stopped at its {timeout:g} s limit" if stopped.is_set() else f"ended with status {proc.returncode}"
    got = f"{len(entries)} result(s)" if entries else "no results"
    failure = {"rule": f"the pytest run {why} and {got}", "details": [line for line in tail if line.strip()]}
    run = {"test": "(the run)", "outcome": "failed", "params": {}, "skip_reason": None, "failures": [failure]}
    return [*entries, run]
