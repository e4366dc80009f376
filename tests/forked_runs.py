"""The suite's commands run as fresh processes forked from one that imported torch once.

A test that runs ``python -m pytest ...`` or ``python -m torch.distributed.run ...`` as a user would paid for
importing torch each time: 2 to 3 s of CPU on a slow 2-core machine, most of such a run.  Here one server process
per test process imports torch, pytest and Hypothesis (and nothing of the project), and forks a child for each
command: the child takes the command's environment, working directory, arguments and standard streams (the caller's
own file descriptors, passed over a Unix socket: a pipe reads as it would from :class:`subprocess.Popen`), runs it
as ``python -m`` or ``python -c`` would, and exits with the command's status (``os._exit`` and signals included).
The project is imported fresh in every child.  Several children may run at once (two torchrun launchers).

Importing pytest and Hypothesis, and Hypothesis's search of the loaded modules for local constants (every torch
module), cost a pytest command 0.3 of its 0.65 s of CPU before its first test (collecting tests/test_layout.py, on
two cores).  What Hypothesis reads from the environment as it loads (``HYPOTHESIS_*``, the CI variables that pick
its ``ci`` profile) is in :data:`_AT_START`; pytest's warning that it cannot rewrite the asserts of Hypothesis's
modules, imported before it started, is left out (:func:`_preloaded_are_not_rewritten`).

The test process's own rank pools fork their ranks from a fork server that is a child of the server too
(:func:`stand_in_fork_server`, installed by conftest where the project's tests run), not a new interpreter.

A command the server cannot reproduce exactly (another program, or an environment that changes how Python or torch
start) runs as an ordinary subprocess: :func:`popen` returns a :class:`subprocess.Popen` for it, :func:`run` None.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hypothesis._settings import _CI_VARS

# Read when Python, torch or Hypothesis load: a command that sets one of these differently runs as a plain subprocess.
_AT_START = ("PYTHON", "TORCH", "OMP_", "MKL_", "CUDA", "LD_", "HYPOTHESIS", *_CI_VARS)
_APPLIED = {"PYTHONDONTWRITEBYTECODE"}  # the child sets it itself
_MESSAGE = 1 << 20  # a request (argv and environment) fits in one datagram of this size


class _Server:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forked_runs"], cwd=cwd, env=env, stdin=theirs,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        theirs.close()
        self.ended: dict[int, int] = {}  # pid -> exit status, as the server reported them
        self.started: int | None = None  # the pid of the child the last request started
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.sock.close()  # the server ends on end of input
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _receive(self, timeout: float | None) -> bool:
        """Read one report within ``timeout`` seconds; False if none came."""
        if timeout is not None and not select.select([self.sock], [], [], max(0.0, timeout))[0]:
            return False
        message = self.sock.recv(_MESSAGE)
        if not message:
            raise RuntimeError("the forked-runs server ended")
        report = json.loads(message)
        if "ended" in report:
            self.ended[report["ended"]] = report["status"]
        else:
            self.started = report["started"]
        return True

    def start(self, request: dict, fds: list[int]) -> int:
        """Fork a child for ``request`` with ``fds`` as its standard input, output and error; its pid."""
        self.started = None
        socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
        while self.started is None:
            self._receive(None)
        return self.started

    def status(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit status (negative: the signal that ended it), or None if it runs past ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.ended:
            if not self._receive(None if deadline is None else deadline - time.monotonic()):
                return None
        return self.ended.pop(pid)


_server: _Server | None = None


def _same_start(env: dict[str, str], base: dict[str, str]) -> bool:
    keys = {k for k in env.keys() | base.keys() if k.startswith(_AT_START) and k not in _APPLIED}
    return all(env.get(k) == base.get(k) for k in keys)


def _forkable(cmd: list[str], env: dict[str, str]) -> bool:
    """``python -m``/``-c`` with an environment that starts Python and torch as this process's did."""
    python = len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] in ("-m", "-c")
    return python and _same_start(env, dict(os.environ))  # the server starts as this process did


def _the_server(cwd: Path) -> _Server:
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server({k: v for k, v in os.environ.items() if not k.startswith(("TPARGMAX_", *_APPLIED))}, cwd)
    return _server


class Forked:
    """A command forked from the server: the part of :class:`subprocess.Popen` the tests use."""

    def __init__(self, server: _Server, pid: int, args: list[str], stdout: io.IOBase | None) -> None:
        self._server, self.pid, self.args, self.stdout = server, pid, args, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it ended, and the server reaped it, after the poll: as Popen, nothing to do
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.stdout is not None:
            self.stdout.close()
        self.wait()


def _child_fd(stream: object, opened: list[int], readers: list[int]) -> int:
    """The descriptor a child's stream gets, as :class:`subprocess.Popen` reads ``stream``: a pipe's write end (its
    read end goes to ``readers``), /dev/null, a file's or a descriptor; ``opened`` collects what this call opened."""
    if stream is subprocess.PIPE:
        read, write = os.pipe()
        readers.append(read)
        opened.append(write)
        return write
    if stream is subprocess.DEVNULL:
        opened.append(os.open(os.devnull, os.O_RDWR))
        return opened[-1]
    return stream if isinstance(stream, int) else stream.fileno()


def popen(
    cmd: list[str],
    *,
    cwd: Path | str,
    env: dict[str, str] | None = None,
    stdout: object = None,
    stderr: object = None,
    text: bool = False,
    start_new_session: bool = False,
) -> Forked | subprocess.Popen:
    """``subprocess.Popen(cmd, ...)`` with these arguments (and stdin from /dev/null), forked from the server
    where it can be; only ``stdout`` may be a pipe."""
    if stderr is subprocess.PIPE:
        raise ValueError("forked_runs.popen: only stdout can be a pipe; send stderr to it with stderr=STDOUT")
    env = dict(os.environ) if env is None else env
    if not _forkable(cmd, env):
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, text=text,
            start_new_session=start_new_session,
        )  # fmt: skip
    return _fork(cmd, cwd, env, stdout, stderr, text, start_new_session)


def stand_in_fork_server() -> None:
    """From now on, the fork server :mod:`multiprocessing` starts in this process (a rank pool's) is forked from the
    server, which imported torch once, with this process's environment and directory: not a new interpreter that
    imports torch again.  :mod:`multiprocessing` checks the fork server's pid with ``waitpid``, so it is given the
    server's, this process's child, which lives as long as it may be called on; the stand-in ends, as a fork server
    does, once this process and every rank it started have closed their end of its "alive" pipe."""
    from multiprocessing import util

    spawn = util.spawnv_passfds
    if getattr(spawn, "stands_in", False):
        return

    def spawnv_passfds(path: str, args: list[str], passfds: list[int]) -> int:
        if (call := _fork_server_call(args)) is None:
            return spawn(path, args, passfds)
        server = _the_server(Path.cwd())
        server.start({"fork_server": call, "env": dict(os.environ), "cwd": os.getcwd()}, list(passfds))
        return server.proc.pid

    spawnv_passfds.stands_in = True
    util.spawnv_passfds = spawnv_passfds


def _fork(
    cmd: list[str], cwd: Path | str, env: dict[str, str], stdout: object, stderr: object, text: bool, session: bool
) -> Forked:
    """:func:`popen` for a command :func:`_forkable` allows."""
    server, opened, readers = _the_server(Path(cwd)), [], []
    try:
        out = _child_fd(1 if stdout is None else stdout, opened, readers)
        err = out if stderr is subprocess.STDOUT else _child_fd(2 if stderr is None else stderr, opened, readers)
        request = {"argv": cmd[1:], "env": env, "cwd": str(cwd), "session": session}
        pid = server.start(request, [_child_fd(subprocess.DEVNULL, opened, readers), out, err])
    finally:
        for fd in opened:  # the child has its own copies now
            os.close(fd)
    reader = open(readers[0], "r" if text else "rb") if readers else None  # noqa: SIM115 - closed by the caller
    return Forked(server, pid, cmd, reader)


def run(
    cmd: list[str], env: dict[str, str], cwd: Path, timeout: float, tmp: Path
) -> subprocess.CompletedProcess | None:
    """``cmd`` (``python -m ...`` or ``python -c ...``) forked from the server, as ``subprocess.run`` with
    ``capture_output=True, text=True`` would give it; None where it must run as a plain subprocess."""
    if not _forkable(cmd, env):
        return None
    with open(tmp / "1", "w+b") as out, open(tmp / "2", "w+b") as err:
        child = _fork(cmd, cwd, env, out, err, text=False, session=False)
        try:
            status = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        outputs = []
        for written in (out, err):
            written.seek(0)
            outputs.append(written.read().decode(errors="replace"))
    return subprocess.CompletedProcess(cmd, status, *outputs)


# --- the server and its children ---------------------------------------------------------------------------------


def _child(request: dict, fds: list[int], closing: list[int]) -> None:
    """Become the command: never returns."""
    import runpy
    import types

    code: object = 1
    try:
        _settle(request, closing)
        if request["session"]:
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - fd 0 for the process's life
        _preloaded_are_not_rewritten()
        _fork_server_in_waiting()
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
        _end_fork_server_in_waiting()
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


def _settle(request: dict, closing: list[int]) -> None:
    """What a forked child leaves of the server (its signal handling, its descriptors ``closing``) and takes of the
    request (its directory and environment)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in closing:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # importing torch fixed it from the server's TMPDIR: read the request's, as at start


def _be_fork_server(fds: list[int], call: list) -> None:
    """Run :mod:`multiprocessing`'s fork server on ``fds`` (its listener and "alive" pipe) with ``call``, the
    preload and keywords of the command it stands in for (:func:`_fork_server_call`)."""
    from multiprocessing import forkserver

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a fork server does: it ends with its clients
    sys.path[0] = ""  # as for the ``-c`` command it stands in for
    preload, data = call
    forkserver.main(*fds, preload, **data)


def _fork_server_child(request: dict, fds: list[int], closing: list[int]) -> None:
    """Become :mod:`multiprocessing`'s fork server for the test process (:func:`stand_in_fork_server`): never
    returns."""
    try:
        _settle(request, closing)
        _be_fork_server(fds, request["fork_server"])
    finally:
        os._exit(0)


def _preloaded_are_not_rewritten() -> None:
    """pytest rewrites the asserts of its plugins' modules as it imports them, and warns of one imported before it
    started: Hypothesis's, which the server imported.  A command run fresh prints no such warning, so this one does
    not either (no assert of Hypothesis's plugin ever fails)."""
    from _pytest.assertion.rewrite import AssertionRewritingHook

    warn = getattr(AssertionRewritingHook, "_warn_already_imported", None)
    if warn is None:  # another pytest: its warning stays
        return

    def unless_preloaded(self: AssertionRewritingHook, name: str) -> None:
        if not name.startswith(("hypothesis", "_hypothesis")):
            warn(self, name)

    AssertionRewritingHook._warn_already_imported = unless_preloaded


def _fork_server_call(args: list[str]) -> tuple[list[str], dict] | None:
    """The preload and the keywords of the command by which :mod:`multiprocessing` starts its fork server, if
    ``args`` is that command: ``python [flags] -c "from multiprocessing.forkserver import main; main(...)"``."""
    if len(args) < 2 or args[-2] != "-c" or not args[-1].startswith("from multiprocessing.forkserver import main;"):
        return None
    call = ast.parse(args[-1]).body[-1].value
    return ast.literal_eval(call.args[2]), ast.literal_eval(call.keywords[0].value)


_waiting: tuple[int, socket.socket] | None = None  # the copy of a forked command that waits to be its fork server


def _fork_server_in_waiting() -> None:
    """Fork now, while this child has no thread, a copy that becomes :mod:`multiprocessing`'s fork server if the
    command starts one (a rank pool does): the fork server would otherwise be a new interpreter that imports torch
    again.  The copy has the command's environment and directory, as a fork server started by the command would;
    it is the command's child, and it ends with the command's end if it was never called on."""
    import ctypes
    from multiprocessing import util

    global _waiting
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a command that ends abruptly takes it along
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a fork server does: it ends with its clients
            message, fds, _, _ = socket.recv_fds(theirs, _MESSAGE, 2)
            if message:
                theirs.close()
                prctl(1, 0)  # from here on a fork server, which ends as multiprocessing's own
                _be_fork_server(fds, json.loads(message))
        finally:
            os._exit(0)
    theirs.close()
    _waiting = (pid, ours)
    spawn = util.spawnv_passfds

    def spawnv_passfds(path: str, args: list[str], passfds: list[int]) -> int:
        global _waiting
        if (call := _fork_server_call(args)) is None:
            return spawn(path, args, passfds)
        util.spawnv_passfds, _waiting = spawn, None  # one stand-in: a fork server started again is a new interpreter
        try:
            socket.send_fds(ours, [json.dumps(call).encode()], list(passfds))
        except OSError:  # the copy is gone (a signal to the command's group): start one as multiprocessing does
            return spawn(path, args, passfds)
        finally:
            ours.close()
        return pid

    util.spawnv_passfds = spawnv_passfds


def _end_fork_server_in_waiting() -> None:
    """At the command's end: the copy it never called on ends first, so that nothing of the command outlives it."""
    if _waiting is not None:
        pid, ours = _waiting
        ours.close()
        with contextlib.suppress(ProcessLookupError, ChildProcessError):  # the command may have reaped it itself
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _serve() -> None:
    """Fork a child for each request on the socket (fd 0); report each start and each end on it."""
    # the point: imported here once, not in every command
    import _hypothesis_pytestplugin  # noqa: F401 - loaded first by every pytest command
    import pytest  # noqa: F401
    import torch  # noqa: F401
    from hypothesis.internal.conjecture.providers import _get_local_constants

    _get_local_constants()  # Hypothesis's first look at every loaded module (none of them the project's)

    sock = socket.socket(fileno=0)
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a child's end wakes the select below
    signal.set_wakeup_fd(wake)
    while True:
        ready = select.select([sock, woken], [], [])[0]
        if woken in ready:
            os.read(woken, 4096)
        while True:  # every child that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            sock.send(json.dumps({"ended": pid, "status": os.waitstatus_to_exitcode(status)}).encode())
        if sock in ready:
            message, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 3)
            if not message:
                return  # the test process closed its end
            sys.stdout.flush()
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                become = _fork_server_child if "fork_server" in request else _child
                become(request, fds, [sock.fileno(), woken, wake])
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"started": pid}).encode())


if __name__ == "__main__":
    _serve()
