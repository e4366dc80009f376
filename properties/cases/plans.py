"""A drawn sampling plan is structure (choices and a seed), like a ``Case``.

:class:`SamplePlan` names how each row's temperature, top-k and top-p are chosen;
:func:`properties.sampling.params.sampling_params` turns it, with the oracle's logits, into the per-row parameters.
Like a ``Case``, its repr rebuilds it, and it checks its own fields, since it may come from someone else's file or
command line.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

import torch
from hypothesis import strategies as st

from properties.cases.case import shown
from properties.cases.text import parse_keywords

# Each row's kind.  "mixed" picks one per row among the first kinds (what it always did: a recorded plan replays
# alike), "every" among every kind, the edges included.  "every" comes first: Hypothesis's simplest draws take a
# list's first element, and they should meet every kind, not the same one.
MIXED_TEMPERATURES = ("greedy", "tiny", "one", "large")
MIXED_TOP_KS = ("off", "one", "small", "at_tie", "vocab")
MIXED_TOP_PS = ("off", "random", "at_mass")
TEMPERATURES = ("every", *MIXED_TEMPERATURES, "mixed", "subnormal", "threshold", "far", "huge")
TOP_KS = ("every", *MIXED_TOP_KS, "mixed", "edge")
TOP_PS = ("every", *MIXED_TOP_PS, "mixed", "exact", "beside", "extreme", "in_tie")
CANDIDATES = (1, 2, 4, 8, 16, 64, 128)
TEMPERATURE_VALUES = {"greedy": 0.0, "tiny": 1e-3, "one": 1.0, "large": 100.0, "far": 1e4, "huge": 1e30}
THRESHOLDS = (1e-6, 1e-5)  # engines' greedy thresholds (vLLM's _SAMPLING_EPS is 1e-5), each with an ulp either side
FLAT = 1e30  # a temperature that flushes every x = logit / T to nearly 0: every mass exp(x - M) is exactly 1
TINY = float(torch.finfo(torch.float32).smallest_normal) * 2.0**-23  # the smallest positive float32, 2**-149
MAX_SEED = 2**63 - 1


@dataclass(frozen=True, repr=False)
class SamplePlan:
    """How a batch's sampling parameters are chosen; ``seed`` seeds the rows' seeds and the random choices."""

    temperature: str = "mixed"
    top_k: str = "off"
    top_p: str = "off"
    candidates: int = 64
    seed: int = 0

    def __repr__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) != f.default]
        return f"SamplePlan({', '.join(parts)})"

    def __post_init__(self) -> None:
        for name, choices in (("temperature", TEMPERATURES), ("top_k", TOP_KS), ("top_p", TOP_PS)):
            if getattr(self, name) not in choices:
                got = shown(getattr(self, name))
                raise ValueError(f"SamplePlan field {name!r} must be one of {choices}, got {got}")
        for name, low, high in (("candidates", 1, 4096), ("seed", 0, MAX_SEED)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"SamplePlan field {name!r} must be an int in [{low}, {high}], got {shown(value)}")

    @property
    def masked(self) -> bool:
        return self.top_k != "off" or self.top_p != "off"


@st.composite
def sample_plans(draw: st.DrawFn, *, masks: bool = True) -> SamplePlan:
    """Any plan; ``masks=False`` (an implementation that samples without top-k or top-p) leaves both off."""
    top_k, top_p = draw(_TOP_K), draw(_TOP_P)
    return SamplePlan(
        temperature=draw(_TEMPERATURE),
        top_k=top_k if masks else "off",
        top_p=top_p if masks else "off",
        candidates=draw(_CANDIDATES),
        seed=draw(_SEED),
    )


# built once, not per draw
_TOP_K, _TOP_P, _TEMPERATURE = st.sampled_from(TOP_KS), st.sampled_from(TOP_PS), st.sampled_from(TEMPERATURES)
_CANDIDATES, _SEED = st.sampled_from(CANDIDATES), st.integers(0, 2**32 - 1)


def plan_from_fields(given: object) -> SamplePlan:
    """A plan from a repro file's fields: a mapping of names to numbers and strings, checked."""
    if not isinstance(given, dict):
        raise ValueError(f"sampling plan must be a mapping of field names to values, got {type(given).__name__}")
    names = [f.name for f in fields(SamplePlan)]
    unknown = [n for n in given if n not in names]
    if unknown:
        raise ValueError(f"unknown SamplePlan field {shown(unknown[0])}; the fields are {', '.join(names)}")
    for name, value in given.items():
        if not isinstance(value, (int, str)):
            raise ValueError(f"SamplePlan field {name!r} must be a number or string, got {shown(value)}")
    missing = [f.name for f in fields(SamplePlan) if f.name not in given and f.default is MISSING]
    if missing:
        raise ValueError(f"SamplePlan field {missing[0]!r} is missing")
    return SamplePlan(**given)


def parse_plan(text: str) -> SamplePlan:
    """Read a ``SamplePlan(...)`` repr as printed in failure messages: keyword literals only, nothing evaluated."""
    return plan_from_fields(parse_keywords(text, "SamplePlan", 1024))


def plan_fields(plan: SamplePlan) -> dict[str, object]:
    return {f.name: getattr(plan, f.name) for f in fields(plan)}
