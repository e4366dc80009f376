"""A drawn sampling plan is structure (choices and a seed); the per-row parameters are built from it and the case.

:class:`SamplePlan` names how each row's temperature, top-k and top-p are chosen; :func:`sampling_params` turns
it, with the oracle's logits, into ``reference.sampling.SamplingParams``: the planted values (a k whose k-th value
is tied, a p equal to a token's mass above it) need the logits.  Like a ``Case``, its repr rebuilds it, and it
checks its own fields, since it may come from someone else's file or command line.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields

import torch
from hypothesis import strategies as st

from properties.case_input import parse_keywords
from properties.cases import Inputs, shown
from properties.runner import oracle_target_logits
from reference.sampling import SamplingParams, mass_above, masses, scaled, top_k_mask
from reference.topk import order_keys

TEMPERATURES = ("greedy", "tiny", "one", "large", "mixed")
TOP_KS = ("off", "one", "small", "at_tie", "vocab", "mixed")
TOP_PS = ("off", "random", "at_mass", "mixed")
CANDIDATES = (1, 2, 4, 8, 16, 64, 128)
TEMPERATURE_VALUES = {"greedy": 0.0, "tiny": 1e-3, "one": 1.0, "large": 100.0}
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
    top_k, top_p = draw(st.sampled_from(TOP_KS)), draw(st.sampled_from(TOP_PS))
    return SamplePlan(
        temperature=draw(st.sampled_from(TEMPERATURES)),
        top_k=top_k if masks else "off",
        top_p=top_p if masks else "off",
        candidates=draw(st.sampled_from(CANDIDATES)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def _tied_k(keys: torch.Tensor, generator: torch.Generator) -> int:
    """A k whose k-th largest key equals the next one (a tie straddles the k-th place), else a small k."""
    ranked = keys.sort(descending=True).values
    tied = ((ranked[1:] == ranked[:-1]) & torch.isfinite(ranked[1:])).nonzero().flatten()
    if not tied.numel():
        return 1 + int(torch.randint(0, min(8, keys.numel()), (1,), generator=generator))
    return int(tied[int(torch.randint(0, tied.numel(), (1,), generator=generator))]) + 1


def _mass_at(x: torch.Tensor, kept: torch.Tensor, generator: torch.Generator) -> float:
    """A p equal (after rounding to float32) to the share of the kept mass strictly above some kept token."""
    e = masses(x.unsqueeze(0), kept.unsqueeze(0))
    above = mass_above(x.unsqueeze(0).masked_fill(~kept.unsqueeze(0), -math.inf), e).squeeze(0)
    shares = (above / e.sum())[kept & (above > 0)]
    if not shares.numel():
        return 0.5
    share = float(shares[int(torch.randint(0, shares.numel(), (1,), generator=generator))])
    return min(1.0, max(share, float(torch.finfo(torch.float32).tiny)))


def sampling_params(plan: SamplePlan, inputs: Inputs) -> SamplingParams:
    """The per-row parameters of ``plan`` for ``inputs``, from the oracle's logits."""
    batch = inputs.case.batch
    gen = torch.Generator().manual_seed(plan.seed)
    full, _ = oracle_target_logits(inputs)
    vocab = full.shape[1]

    def pick(choice: str, choices: tuple[str, ...]) -> list[str]:
        if choice != "mixed":
            return [choice] * batch
        names = [c for c in choices if c != "mixed"]
        return [names[int(i)] for i in torch.randint(0, len(names), (batch,), generator=gen)]

    temperature = torch.tensor([TEMPERATURE_VALUES[t] for t in pick(plan.temperature, TEMPERATURES)])
    temperature = torch.where(temperature == 1.0, torch.rand(batch, generator=gen) * 1.5 + 0.25, temperature).float()
    seeds = torch.randint(-(2**62), 2**62, (batch,), generator=gen, dtype=torch.int64)
    params = SamplingParams(temperature, torch.zeros(batch, dtype=torch.int64), torch.ones(batch), seeds)
    x = scaled(full, params)
    top_k = []
    for row, choice in enumerate(pick(plan.top_k, TOP_KS)):
        small = 2 + int(torch.randint(0, 7, (1,), generator=gen))
        k = {"off": 0, "one": 1, "small": small, "vocab": vocab}.get(choice)
        top_k.append(_tied_k(order_keys(x[row]), gen) if k is None else min(k, inputs.vocab))
    params = SamplingParams(temperature, torch.tensor(top_k, dtype=torch.int64), params.top_p, seeds, plan.candidates)
    kept = top_k_mask(x, params.top_k)
    top_p = []
    for row, choice in enumerate(pick(plan.top_p, TOP_PS)):
        p = {"off": 1.0, "random": 1.0 - float(torch.rand(1, generator=gen)) * 0.999}.get(choice)
        top_p.append(_mass_at(x[row], kept[row], gen) if p is None else p)
    return SamplingParams(temperature, params.top_k, torch.tensor(top_p, dtype=torch.float32), seeds, plan.candidates)


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
