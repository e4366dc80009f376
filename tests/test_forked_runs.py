"""A command forked from the torch-importing server ends as it would in a new interpreter: its status (``sys.exit``,
``os._exit``, a signal, an uncaught exception), its output, its arguments, environment and directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forked_runs
from tests.suite import ROOT, run

PY = sys.executable


@pytest.mark.parametrize(
    "code, status",
    [
        ("import sys; sys.exit(3)", 3),
        ("import os; os._exit(5)", 5),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -9),
        ("raise SystemExit('said on stderr')", 1),
        ("pass", 0),
    ],
)
def test_the_status_is_the_commands(code, status):
    assert run([PY, "-c", code]).returncode == status


def test_an_uncaught_exception_is_a_traceback_of_the_command_only():
    done = run([PY, "-c", "raise ValueError('boom')"])
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "Traceback (most recent call last):",
        '  File "<string>", line 1, in <module>',
        "ValueError: boom",
    ], done.stderr


def test_arguments_environment_and_directory_are_the_commands(tmp_path):
    code = "import os, sys; print(sys.argv[1:], os.environ['TPARGMAX_X'], os.getcwd(), 'torch' in sys.modules)"
    done = run([PY, "-c", code, "a", "b"], TPARGMAX_X="set")
    assert done.stdout == f"['a', 'b'] set {ROOT} True\n" and done.stderr == "", done
    temp = run([PY, "-c", "import tempfile; print(tempfile.gettempdir())"], TMPDIR=str(tmp_path))
    assert temp.stdout == f"{tmp_path}\n", temp  # the command's TMPDIR, though importing torch read the server's
    module = run([PY, "-m", "tpargmax", "--help"])
    assert module.returncode == 0 and module.stdout.startswith("usage: tpargmax"), module


def test_a_command_past_its_timeout_is_killed(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        forked_runs.run([PY, "-c", "import time; time.sleep(60)"], dict(os.environ), ROOT, 0.5, tmp_path)
    assert run([PY, "-c", "print('next')"]).stdout == "next\n"  # the server serves on


def test_what_changes_how_python_starts_runs_as_a_plain_subprocess(tmp_path):
    env = dict(os.environ)
    assert forked_runs.run([PY, "-c", "pass"], {**env, "PYTHONPATH": str(tmp_path)}, ROOT, 10, tmp_path) is None
    assert forked_runs.run([PY, "scripts/gpu_check"], env, ROOT, 10, tmp_path) is None
    other_ci = "false" if env.get("GITHUB_ACTIONS") == "true" else "true"
    for read_by_hypothesis in ({"HYPOTHESIS_NO_PLUGINS": "1"}, {"GITHUB_ACTIONS": other_ci}):  # as it loads
        assert forked_runs.run([PY, "-c", "pass"], {**env, **read_by_hypothesis}, ROOT, 10, tmp_path) is None


def test_a_pytest_command_finds_hypothesis_loaded_and_says_what_a_fresh_one_says():
    """The server imported Hypothesis: pytest, which would rewrite its plugin's asserts, prints no warning that it
    could not."""
    code = "import sys; print('hypothesis' in sys.modules, 'properties' in sys.modules)"
    assert run([PY, "-c", code]).stdout == "True False\n"
    args = ["-p", "no:xdist", "-q", "tests/test_layout.py", "-k", "padding_only", "-W", "error"]
    done = run([PY, "-m", "pytest", *args])
    assert done.returncode == 0 and "warning" not in done.stdout.lower(), done.stdout[-3000:]


def test_the_server_starts_as_this_process_did_whatever_the_first_command_asks(tmp_path, monkeypatch):
    """A first command that must run apart (its own PYTHONPATH) does not leave every later one to run apart too."""
    started: list[dict[str, str]] = []

    class Recorded:  # the server as started, without starting one
        def __init__(self, env: dict[str, str], cwd: Path) -> None:
            started.append(env)
            raise RuntimeError("started")

    monkeypatch.setattr(forked_runs, "_server", None)
    monkeypatch.setattr(forked_runs, "_Server", Recorded)
    env = dict(os.environ)
    assert forked_runs.run([PY, "-c", "pass"], {**env, "PYTHONPATH": str(tmp_path)}, ROOT, 10, tmp_path) is None
    assert started == []
    with pytest.raises(RuntimeError, match="started"):
        forked_runs.run([PY, "-c", "pass"], env, ROOT, 10, tmp_path)
    assert started[0].get("PYTHONPATH") == env.get("PYTHONPATH"), started


def test_children_run_at_once_read_through_a_pipe_in_their_own_session():
    """What torchrun's two launchers and the pool's driver need: a second command runs while the first still does,
    a line the first prints arrives before it ends, a session of its own, and an end by signal."""
    first = forked_runs.popen(
        [PY, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    with first:
        assert isinstance(first, forked_runs.Forked) and first.stdout.readline() == "ready\n"
        assert os.getpgid(first.pid) == first.pid != os.getpgid(0)
        assert first.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            first.wait(0.2)
        second = forked_runs.popen([PY, "-c", "print('second')"], cwd=ROOT, stdout=subprocess.PIPE)
        assert second.wait(30) == 0 and second.stdout.read() == b"second\n"  # the first still sleeps
        second.stdout.close()
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == -signal.SIGTERM and first.stdout.read() == ""  # its end closed the pipe


POOL = """
from multiprocessing import forkserver
from groups.pool import RankPool
pool = RankPool(2)  # returns once both ranks joined their gloo group
server = forkserver._forkserver._forkserver_pid
with open(f"/proc/{server}/cmdline") as fh:
    print(fh.read().split(chr(0))[1:3])
with open(f"/proc/{pool.pids[0]}/stat") as fh:
    print(int(fh.read().rsplit(")", 1)[1].split()[1]) == server)
pool.close()
"""


def test_a_rank_pool_in_a_command_forks_its_fork_server_from_the_command_instead_of_importing_torch_again():
    """The fork server is a copy of the command made before it ran, not a ``python -c ...forkserver...`` of its own;
    the ranks are its children and join their group."""
    done = run([PY, "-c", POOL])
    assert done.returncode == 0 and done.stdout == "['-m', 'tests.forked_runs']\nTrue\n", done
