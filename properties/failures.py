"""How a property fails: the failure types, the one place a failure is raised from, and the replay strings.

Every wing raises through :func:`fail`, so a failure always reads the same way (the rule in brackets, the property,
the implementation, the case, the replay command), and :func:`repro_extra` adds what a repro file needs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from properties.cases.case import Inputs
from properties.cases.plans import SamplePlan

_GROUPS = {"sim": "a simulated group", "gloo": "a gloo process group", "torchrun": "the torchrun job's group"}


class PropertyFailure(AssertionError):
    """A property broke: the message starts with the rule, then the case and how to replay it."""


class ImplementationHung(BaseException):
    """The run never returned: a rank hung, a collective timed out, a rank's process ended, or the implementation
    tried to end the run.

    A BaseException, so that Hypothesis stops at once instead of shrinking
    through one timeout per example; pytest still reports it as a failure.
    """


def replay_backend(inputs: Inputs) -> str:
    """Where a find replays: a torchrun find on a local pool (on the simulated group with CUDA tensors, as gloo
    carries CPU ones)."""
    if inputs.backend != "torchrun":
        return inputs.backend
    return "gloo" if inputs.device == "cpu" else "sim"


def replay_command(impl: object, inputs: Inputs, k: int | None = None, sampling: dict | None = None) -> str:
    backend = replay_backend(inputs)
    width = "" if k is None else f" --k {k}"
    if sampling is not None:  # a sampling property's plan, recorded as its fields
        width += f' --sampling "{SamplePlan(**sampling)!r}"'
    device = "" if inputs.device == "cpu" else f" --device {inputs.device}"
    return f'python -m properties.replay --impl {impl}{width} --backend {backend}{device} "{inputs.case!r}"'


def recorded_replay(repro: dict) -> str:
    """The replay command of a failure's record (``PropertyFailure.repro``), whatever its property needs."""
    extra = repro["extra"]
    if "distribution" in extra:  # many seeds of one pinned case: the test itself replays it
        test = f"properties/test_sampling.py::test_sampled_distribution[{repro['impl']}-{extra['distribution']}]"
        return f"python -m pytest '{test}' --sampling-impl {repro['impl']} -p no:xdist"
    return replay_command(repro["impl"], repro["inputs"], extra.get("k"), extra.get("sampling"))


def fail(
    rule: str,
    details: list[str],
    impl: object,
    inputs: Inputs,
    prop: str,
    kind: type = PropertyFailure,
    k: int | None = None,
) -> None:
    """The single place every property failure is raised from (one bug class for Hypothesis)."""
    __tracebackhide__ = True
    exc = kind(
        "\n".join(
            [
                f"[{rule}]",
                f"  property: {prop}",
                f"  implementation: {impl} on {_GROUPS[inputs.backend]} of tp={inputs.tp}",
                *(f"  {d}" for d in details),
                f"  applied plans: {', '.join(inputs.applied) or 'none'}",
                f"  case: {inputs.case!r}",
                f"  replay: {replay_command(impl, inputs, k)}",
            ]
        )
    )
    # what a repro file needs (written by conftest when the test finally fails; see properties/repro.py)
    exc.repro = {
        "rule": rule,
        "property": prop,
        "impl": str(impl),
        "inputs": inputs,
        "extra": {},
        "env": env_of(impl),
        "versions": versions_of(impl),
    }
    raise exc


def env_of(impl: object) -> dict[str, str]:
    """The settings of the environment variables ``impl`` reads (``Impl.env``) that this run has: what made it run
    the code it ran (vLLM's shared-memory communicator), so that a replay without them does not judge other code."""
    return {name: os.environ[name] for name in getattr(impl, "env", ()) if name in os.environ}


def versions_of(impl: object) -> dict[str, str]:
    """The installed versions of the distributions whose code ``impl`` runs (``Impl.packages``: vLLM's CPU build or
    its CUDA wheel), so that a replay can tell which build failed."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in getattr(impl, "packages", ()):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


@contextmanager
def repro_extra(**extra: object) -> Iterator[None]:
    """Add what a property needs beyond the inputs (rows, a bad-input kind) to failures raised inside."""
    try:
        yield
    except (PropertyFailure, ImplementationHung) as exc:
        exc.repro["extra"].update(extra)
        line = f"  replay: {recorded_replay(exc.repro)}"  # with all the record holds now (a top-k's k, a plan)
        exc.args = ("\n".join(line if s.startswith("  replay: ") else s for s in str(exc).split("\n")),)
        raise
