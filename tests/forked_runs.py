"""The suite's commands run as fresh processes forked from one that imported torch once.

A test that runs ``python -m pytest ...`` or ``python -m tpargmax ...`` as a user would paid for importing torch
each time: 2 to 3 s of CPU on a slow 2-core machine, most of such a run.  Here one server process per test process
imports torch (and nothing of the project), and forks a child for each command: the child takes the command's
environment, working directory and arguments, runs it as ``python -m`` or ``python -c`` would, with its own output
files, and exits with the command's status (``os._exit`` and signals included).  Hypothesis, pytest and the project
are imported fresh in every child.

A command the server cannot reproduce exactly (another program, or an environment that changes how Python or torch
start) runs as an ordinary subprocess: :func:`run` returns None for it.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

# Read when Python or torch start: a command that sets one of these differently runs as a plain subprocess.
_AT_START = ("PYTHON", "TORCH", "OMP_", "MKL_", "CUDA", "LD_")
_APPLIED = {"PYTHONDONTWRITEBYTECODE"}  # the child sets it itself


class _Server:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forked_runs"], cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0,
        )  # fmt: skip  # unbuffered replies: a line read is never one that select() would still wait for
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the server ends on end of input
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _reply(self, timeout: float | None) -> dict | None:
        if timeout is not None and not select.select([self.proc.stdout], [], [], max(0.0, timeout))[0]:
            return None
        line = self.proc.stdout.readline()  # byte by byte from the pipe: nothing past the line is read
        if not line:
            raise RuntimeError("the forked-runs server ended")
        return json.loads(line)

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float, out: Path) -> int:
        """The child's exit status (negative: the signal that ended it)."""
        request = {"argv": argv, "env": env, "cwd": str(cwd), "stdout": str(out / "1"), "stderr": str(out / "2")}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        pid = self._reply(None)["pid"]
        done = self._reply(timeout)
        if done is None:
            os.kill(pid, signal.SIGKILL)
            self._reply(None)
            raise TimeoutError(pid)
        return done["status"]


_server: _Server | None = None


def _same_start(env: dict[str, str], base: dict[str, str]) -> bool:
    keys = {k for k in env.keys() | base.keys() if k.startswith(_AT_START) and k not in _APPLIED}
    return all(env.get(k) == base.get(k) for k in keys)


def run(
    cmd: list[str], env: dict[str, str], cwd: Path, timeout: float, tmp: Path
) -> subprocess.CompletedProcess | None:
    """``cmd`` (``python -m ...`` or ``python -c ...``) forked from the server, as ``subprocess.run`` with
    ``capture_output=True, text=True`` would give it; None where it must run as a plain subprocess."""
    global _server
    if len(cmd) < 3 or cmd[0] != sys.executable or cmd[1] not in ("-m", "-c"):
        return None
    if not _same_start(env, dict(os.environ)):  # the server starts as this process did, not as one command asks
        return None
    if _server is None or _server.proc.poll() is not None:
        _server = _Server({k: v for k, v in os.environ.items() if not k.startswith(("TPARGMAX_", *_APPLIED))}, cwd)
    try:
        status = _server.run(cmd[1:], env, cwd, timeout, tmp)
    except TimeoutError:
        raise subprocess.TimeoutExpired(cmd, timeout) from None
    read = [(tmp / name).read_text(errors="replace") if (tmp / name).exists() else "" for name in ("1", "2")]
    return subprocess.CompletedProcess(cmd, status, *read)


# --- the server and its children ---------------------------------------------------------------------------------


def _child(request: dict) -> None:
    """Become the command: never returns."""
    import runpy
    import types

    code: object = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - fd 0 for the process's life
        flag, what, *args = request["argv"]
        if flag == "-m":
            sys.argv, sys.path[0] = [what, *args], request["cwd"]
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        else:
            sys.argv, sys.path[0] = ["-c", *args], ""
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            exec(compile(what, "<string>", "exec"), main.__dict__)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # noqa: BLE001 - printed as the interpreter would, without this file's frames
        import traceback

        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        code = 1
    try:
        threading._shutdown()  # as the interpreter does at exit: wait for non-daemon threads, then atexit
        atexit._run_exitfuncs()
    finally:
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed stream: nothing left to write
                pass
        os._exit(code or 0)


def _serve() -> None:
    import torch  # noqa: F401 - the point: imported here once, not in every command

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    _serve()
