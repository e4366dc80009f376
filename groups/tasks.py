"""One task on one rank, and what a driver makes of every rank's reply.

Shared by the gloo process pool and the torchrun job, so both run the same rank
code and report faults the same way.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from groups.simulated import RankTimeout
from sharded.group import Traffic
from sharded.impls import Impl, load_impl
from sharded.no_exit import ImplementationExit, guarded


class RankLost(RankTimeout):
    """A rank process ended, or closed its connection to the driver, before it answered a task."""


class RemoteError(RuntimeError):
    """An exception raised on a rank; the message names the rank and carries its traceback."""

    remote_type = "Exception"  # the name of the exception the rank raised


class RemoteValueError(RemoteError, ValueError):
    """A ValueError raised on a rank (bad input), so callers can catch it as one."""


class StartFailed(BaseException):
    """An implementation's start-up (:meth:`Impl.start`: an engine's imports and distributed state) raised on a rank,
    so no case reached it and nothing was judged.

    A BaseException, so that no check reads it as the implementation's answer to a case (no verdict, no repro file)
    and Hypothesis stops at once; pytest reports it as the test's error, in one line that says what the start
    needs."""


def started(spec: str, start: Callable[[], object]) -> None:
    """Run a driver's start-up task for ``spec``; a rank's exception in it is :class:`StartFailed`."""
    try:
        start()
    except RemoteError as exc:
        raise StartFailed(f"{spec} cannot start here: {exc}") from exc


class TaskRunner:
    """Runs implementation tasks on this rank's group and turns the outcome into a picklable reply."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self._impls: dict[str, Impl] = {}

    def run(self, spec: str, kwargs: dict[str, Any] | None) -> tuple:
        """Run ``spec`` with ``kwargs``; ``kwargs=None`` loads and starts it (:meth:`Impl.start`) only."""
        group = self.group
        group.traffic, group.collective_failed = Traffic(), False
        try:
            with guarded(f"rank {group.rank} of {group.world_size}"):  # SystemExit or os._exit: a failure, not an end
                impl = self._impls.get(spec)
                if impl is None:
                    impl = load_impl(spec)
                    impl.start(group)
                    self._impls[spec] = impl
                if kwargs is None:
                    return ("ok", None, group.traffic)
                return ("ok", impl.fn(**kwargs, group=group), group.traffic)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the driver
            # A failed collective is a consequence (a peer died, hung or raised), not the cause.
            why = (type(exc).__name__, isinstance(exc, ValueError), str(exc), traceback.format_exc())
            return ("error", *why, group.collective_failed)


def in_step(replies: dict[int, tuple], world_size: int) -> bool:
    """Whether the group can take another task: every rank answered, and no collective failed."""
    errors = [rep for rep in replies.values() if rep[0] == "error"]
    return len(replies) == world_size and (not errors or (len(errors) == world_size and not any(e[5] for e in errors)))


def outcome(
    replies: dict[int, tuple],
    world_size: int,
    label: str,
    absent: str,
    lost: bool = False,
    limit: float | None = None,
    limit_name: str = "collective timeout",
) -> tuple[list[Any], list[Traffic]]:
    """Outputs and traffic in rank order, or the exception that explains the failure.

    A rank's own exception wins over the collective failures it caused in its
    peers.  When every rank failed in a collective (say, mismatched calls), the
    lowest rank's error is raised.  Otherwise a collective that some rank never
    joined, because it hung, died or returned early, raises RankTimeout
    (``absent`` says why ranks gave no answer), whichever side of the timeout
    the waiting ranks' own errors arrived on: :class:`RankLost` when a silent
    rank's process ended or closed its connection (``lost``), not a hang.  ``limit`` is the timeout the driver
    waited out (``limit_name``), carried by the :class:`RankTimeout`.
    """
    errors = {r: rep for r, rep in replies.items() if rep[0] == "error"}
    causes = {r: rep for r, rep in errors.items() if not rep[5]}
    if causes or len(errors) == world_size:
        rank = min(causes or errors)
        _, name, is_value_error, message, tb, _ = errors[rank]
        if name == ImplementationExit.__name__:  # its message names the rank and what it did
            exc: Exception = ImplementationExit(message)
        else:
            exc = (RemoteValueError if is_value_error else RemoteError)(
                f"rank {rank} of {world_size} raised {name}: {message}"
            )
            exc.remote_type = name
        exc.add_note(f"traceback on rank {rank}:\n{tb}")
        raise exc
    if errors or len(replies) < world_size:
        answered = sorted(set(replies) - set(errors))
        why = [absent] if absent else []
        if errors:
            why.append(f"rank(s) {sorted(errors)} failed in a collective waiting for the others")
        if answered:
            why.append(f"rank(s) {answered} had answered")
        message = f"{label} of {world_size}: {'; '.join(why)}"
        raise RankLost(message) if lost else RankTimeout(message, limit, limit_name)
    return [replies[r][1] for r in range(world_size)], [replies[r][2] for r in range(world_size)]
