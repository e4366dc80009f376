"""An implementation under test cannot end the process that judges it.

Exit 0 from a replay means "fixed", and a test that ends without failing reads as a pass.  Code under test that
raises ``SystemExit``, ``KeyboardInterrupt`` or a test runner's own outcome (pytest's skip: every
``BaseException`` that is not an ``Exception``), or calls ``os._exit``, would otherwise end the run with a status of
its choosing.  Inside :func:`guarded`, each becomes :class:`ImplementationExit`, an ordinary exception that the
properties report as the implementation's failure, naming what it did.

``os._exit`` is replaced, on first use, by a function that raises on a thread of this process inside
:func:`guarded`, and exits as before everywhere else (other threads, a forked child).  An exit below Python (a C
library calling ``exit``) is out of reach here: a rank process that makes one is reported by the pool as a rank that
exited, and on the simulated group it ends the process; see docs/fuzzing.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ImplementationExit(RuntimeError):
    """The implementation under test tried to end the process (the message says where and how)."""


class _ExitCalled(BaseException):
    """Raised in place of ``os._exit`` inside :func:`guarded`; a BaseException, so ``except Exception`` in the code
    under test cannot swallow it."""

    def __init__(self, status: object) -> None:
        super().__init__(status)
        self.status = status


_inside = threading.local()  # how deeply this thread is inside guarded()
_real_exit = os._exit
_owner = os.getpid()


def _exit(status: int) -> None:
    if getattr(_inside, "depth", 0) and os.getpid() == _owner:
        raise _ExitCalled(status)
    _real_exit(status)


def _install() -> None:
    global _owner
    if os._exit is not _exit:
        _owner = os.getpid()
        os._exit = _exit


def described(exc: BaseException) -> str:
    """``SystemExit(0)``: the exception as it was raised."""
    return f"{type(exc).__name__}({', '.join(map(repr, exc.args))})"


@contextmanager
def guarded(where: str) -> Iterator[None]:
    """Run code under test: an attempt to end the process raises :class:`ImplementationExit` naming ``where``."""
    _install()
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        yield
    except _ExitCalled as exc:
        raise ImplementationExit(f"{where} called os._exit({exc.status!r})") from None
    except Exception:
        raise
    except BaseException as exc:  # SystemExit, KeyboardInterrupt, pytest's skip and exit, GeneratorExit
        raise ImplementationExit(f"{where} raised {described(exc)}") from exc
    finally:
        _inside.depth -= 1
