"""One run's settings: built once (by conftest from pytest's options, or by a command from its own), read from here.

A context variable holds them, so a test can run with other settings inside ``changed(...)`` and have the run's
back on leaving, and nothing writes another module's globals.  The ranks never read them: the caller's thread
prepares every case and starts every group.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from groups.simulated import DEFAULT_TIMEOUT
from sharded.impls import Impl

BACKENDS = ("sim", "gloo", "torchrun")
HEADS = ("all", "base")  # base: only base ids are tokens (added rows, if any, lie beyond the logits vocabulary)
LAYOUTS = ("diverged", "dp", "uneven")  # beyond one even split: properties/test_layouts.py, --layouts


@dataclass(frozen=True)
class Settings:
    """What a run tests, where, and how long a collective may take."""

    impls: tuple[Impl, ...] = ()
    topk_impls: tuple[Impl, ...] = ()
    sampling_impls: tuple[Impl, ...] = ()
    backends: tuple[str, ...] = ("sim",)
    device: str = "cpu"  # where every rank's tensors and the oracle live: groups.devices
    collective_timeout: float = DEFAULT_TIMEOUT
    gloo_tps: tuple[int, ...] = (2, 4)
    heads: str = "all"
    layouts: tuple[str, ...] = LAYOUTS  # the layouts the implementations under test take (--layouts)
    pinned: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))  # Case fields every case takes
    torchrun_job: Any = None  # the TorchrunJob when properties.torchrun runs this process as rank 0
    repro_dir: str = "repro"
    listening: bool = False  # case features as events: statistics shown, or examples recorded (tpargmax coverage)
    e2e_groups: tuple[tuple[str, str], ...] = ()  # (dtype, method) of vLLM's engine end to end (--e2e), in run order


_CURRENT: ContextVar[Settings] = ContextVar("tpargmax_settings", default=Settings())  # noqa: B039 - frozen


def current() -> Settings:
    """This run's settings."""
    return _CURRENT.get()


def configure(**changes: Any) -> Settings:
    """Set this run's settings (those not named stay as they are); a command or conftest calls it once."""
    new = replace(current(), **changes)
    _CURRENT.set(new)
    return new


@contextmanager
def changed(**changes: Any) -> Iterator[Settings]:
    """Run the block with ``changes`` (or none: whatever the block configures) and the run's settings back after."""
    token = _CURRENT.set(replace(current(), **changes))
    try:
        yield current()
    finally:
        _CURRENT.reset(token)


def parse_layouts(text: str | None) -> tuple[str, ...]:
    """``--layouts``' names (comma-separated, or ``none``); None: every layout.  A ValueError names an unknown one."""
    if text is None:
        return LAYOUTS
    names = tuple(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none")
    unknown = sorted(set(names) - set(LAYOUTS))
    if unknown:
        raise ValueError(f"--layouts: choose from {', '.join(LAYOUTS)} or none, got {unknown}")
    return names


def layout_refusal(name: str, impls: list[Impl]) -> str | None:
    """Why a property of the layout ``name`` does not run ``impls``: this run's ``--layouts`` leaves it out, or an
    implementation does not take it (``Impl.refuses_layout``); None where it runs."""
    if name not in current().layouts:
        return f"--layouts leaves out {name}"
    return next((why for impl in impls if (why := impl.refuses_layout(name)) is not None), None)


def pinned_head(impls: list[Impl]) -> Mapping[str, object]:
    """The head every case takes: the one the implementations under test were built for (model classes), if any."""
    fixed = {tuple(sorted(impl.head.items())): impl for impl in impls if impl.head}
    if len(fixed) > 1:
        raise ValueError(f"{' and '.join(map(str, fixed.values()))} fix different heads: test them in separate runs")
    return MappingProxyType(dict(next(iter(fixed))) if fixed else {})
