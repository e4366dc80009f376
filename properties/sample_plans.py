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
    e, above = _masses_above(x, kept)
    shares = (above / e.sum())[kept & (above > 0)]
    if not shares.numel():
        return 0.5
    share = float(shares[int(torch.randint(0, shares.numel(), (1,), generator=generator))])
    return min(1.0, max(share, float(torch.finfo(torch.float32).tiny)))


def _kinds(
    choice: str, choices: tuple[str, ...], mixed: tuple[str, ...], batch: int, gen: torch.Generator
) -> list[str]:
    """Each row's kind: ``choice``, or for "mixed" (among ``mixed``) and "every" (among ``choices``) one per row."""
    if choice not in ("mixed", "every"):
        return [choice] * batch
    names = mixed if choice == "mixed" else [c for c in choices if c not in ("mixed", "every")]
    return [names[int(i)] for i in torch.randint(0, len(names), (batch,), generator=gen)]


def _one_of(values: list[float], gen: torch.Generator) -> float:
    return values[int(torch.randint(0, len(values), (1,), generator=gen))]


def _ulps(value: float) -> list[float]:
    """``value`` in float32 and the float32 on each side of it."""
    v = torch.tensor([value], dtype=torch.float32)
    return [float(torch.nextafter(v, v.new_tensor([-math.inf]))), float(v), float(torch.nextafter(v, v * 2))]


def _temperature(kind: str, gen: torch.Generator) -> float:
    """An edge kind's temperature: a subnormal (half the time the smallest), an engine's greedy threshold or an ulp
    beside it, or a far or flattening one."""
    if kind == "subnormal":
        return TINY * _one_of([1, int(torch.randint(1, 2**23, (1,), generator=gen))], gen)
    if kind == "threshold":
        return _one_of([t for base in THRESHOLDS for t in _ulps(base)], gen)
    return TEMPERATURE_VALUES[kind]


def _top_k_edge(x: torch.Tensor, vocab: int, gen: torch.Generator) -> int:
    """One less than the logits vocabulary, the vocabulary, one more, or the row's count of finite ``x``."""
    return _one_of([vocab - 1, vocab, vocab + 1, int(torch.isfinite(x).sum())], gen)


def _masses_above(x: torch.Tensor, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each kept token's mass and the kept mass strictly above it (float64), as the classic sampler sums them."""
    e = masses(x.unsqueeze(0), kept.unsqueeze(0))
    return e[0], mass_above(x.unsqueeze(0).masked_fill(~kept.unsqueeze(0), -math.inf), e)[0]


def _exact_share(x: torch.Tensor, kept: torch.Tensor, gen: torch.Generator) -> float | None:
    """A float32 ``p`` with ``p * total == above`` exactly in float64 for some kept token: the token sits on the
    boundary, where ``<`` drops it and ``<=`` keeps it; None where no share is exact."""
    e, above = _masses_above(x, kept)
    total = e.sum()
    p = (above / total).float().double()
    exact = p[kept & (p * total == above) & (p > 0) & (p < 1)]
    return None if not exact.numel() else float(exact[int(torch.randint(0, exact.numel(), (1,), generator=gen))])


def _in_tie(x: torch.Tensor, kept: torch.Tensor, gen: torch.Generator, tries: int = 8) -> float | None:
    """A ``p`` that cuts a group of tied kept tokens after its first: the contract keeps the whole group, a sampler
    that walks token by token keeps one of it; None where no tied group (of ``tries`` drawn) has mass to cut."""
    e, above = _masses_above(x, kept)
    total = float(e.sum())
    values, counts = x[kept & (e > 0)].unique(return_counts=True)
    tied = values[counts >= 2]
    for i in torch.randperm(tied.numel(), generator=gen)[:tries].tolist():
        first = int((kept & (x == tied[i])).nonzero()[0])
        before, mass = float(above[first]), float(e[first])
        p = float(torch.tensor((before + mass / 2) / total, dtype=torch.float32))
        if 0 < p < 1 and before < p * total <= before + mass:
            return p
    return None


def _beside(x: torch.Tensor, kept: torch.Tensor, gen: torch.Generator) -> float:
    """A share of the kept mass above a token, rounded to float32, then one float32 ulp up or down."""
    below, _, above = _ulps(_mass_at(x, kept, gen))
    return min(1.0, max(TINY, _one_of([below, above], gen)))


def _extreme(gen: torch.Generator) -> float:
    """The smallest positive float32 (keeps the largest tokens alone) or the largest below 1 (drops only the
    tokens whose mass is lost in the sum)."""
    return _one_of([TINY, 1.0 - 2.0**-24], gen)


def sampling_params(plan: SamplePlan, inputs: Inputs) -> SamplingParams:
    """The per-row parameters of ``plan`` for ``inputs``, from the oracle's logits.

    The generator's draws for the kinds "mixed" picks among are those they always were, so a recorded plan builds
    the same parameters; the edge kinds draw more only where they are chosen.  ``top_p="exact"`` plants equal masses
    on a row whose own masses give no exact share: its temperature becomes :data:`FLAT`; where the row then keeps
    an odd number of them, its top-k keeps a power of two (``j / n`` is exact in binary only so).
    """
    batch = inputs.case.batch
    gen = torch.Generator().manual_seed(plan.seed)
    full, _ = oracle_target_logits(inputs)
    vocab = full.shape[1]

    kinds = _kinds(plan.temperature, TEMPERATURES, MIXED_TEMPERATURES, batch, gen)
    temperature = torch.tensor([TEMPERATURE_VALUES.get(t, 0.0) for t in kinds])
    temperature = torch.where(temperature == 1.0, torch.rand(batch, generator=gen) * 1.5 + 0.25, temperature).float()
    for row, kind in enumerate(kinds):
        if kind not in MIXED_TEMPERATURES:
            temperature[row] = _temperature(kind, gen)
    seeds = torch.randint(-(2**62), 2**62, (batch,), generator=gen, dtype=torch.int64)
    params = SamplingParams(temperature, torch.zeros(batch, dtype=torch.int64), torch.ones(batch), seeds)
    x = scaled(full, params)
    top_k = []
    for row, choice in enumerate(_kinds(plan.top_k, TOP_KS, MIXED_TOP_KS, batch, gen)):
        small = 2 + int(torch.randint(0, 7, (1,), generator=gen))
        if choice == "at_tie":
            top_k.append(_tied_k(order_keys(x[row]), gen))
        elif choice == "edge":
            top_k.append(_top_k_edge(x[row], inputs.vocab, gen))
        else:
            top_k.append(min({"off": 0, "one": 1, "small": small, "vocab": vocab}[choice], inputs.vocab))
    top_k = torch.tensor(top_k, dtype=torch.int64)
    kept = top_k_mask(x, top_k)
    top_p = []
    for row, choice in enumerate(_kinds(plan.top_p, TOP_PS, MIXED_TOP_PS, batch, gen)):
        p = {"off": 1.0, "random": 1.0 - float(torch.rand(1, generator=gen)) * 0.999}.get(choice)
        if choice == "exact" and not bool(params.greedy[row]):
            p = _exact_share(x[row], kept[row], gen)
            if p is None:  # plant equal masses: T flattens x, whose order (and so top-k's set) stays
                temperature[row] = FLAT
                x[row] = full[row].float() / temperature[row]
                kept[row] = top_k_mask(x[row : row + 1], top_k[row : row + 1])[0]
                p = _exact_share(x[row], kept[row], gen)
            equal = int((kept[row] & torch.isfinite(x[row])).sum())
            if p is None and equal > 2:  # n equal masses and n odd: keep a power of two of them
                top_k[row] = 2 ** (equal.bit_length() - 1)
                kept[row] = top_k_mask(x[row : row + 1], top_k[row : row + 1])[0]
                p = _exact_share(x[row], kept[row], gen)
        elif choice == "beside":
            p = _beside(x[row], kept[row], gen)
        elif choice == "extreme":
            p = _extreme(gen)
        elif choice == "in_tie":
            p = _in_tie(x[row], kept[row], gen)
        top_p.append(_mass_at(x[row], kept[row], gen) if p is None else p)
    return SamplingParams(temperature, top_k, torch.tensor(top_p, dtype=torch.float32), seeds, plan.candidates, vocab)


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
