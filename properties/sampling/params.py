"""A plan's per-row sampling parameters, from the oracle's logits: the planted values (a k whose k-th value is tied,
a p equal to a token's mass above it) need them."""

from __future__ import annotations

import math

import torch

from properties.cases.case import Inputs
from properties.cases.plans import (
    FLAT,
    MIXED_TEMPERATURES,
    MIXED_TOP_KS,
    MIXED_TOP_PS,
    TEMPERATURE_VALUES,
    TEMPERATURES,
    THRESHOLDS,
    TINY,
    TOP_KS,
    TOP_PS,
    SamplePlan,
)
from properties.oracle import answer
from reference.sampling import SamplingParams, mass_above, masses, scaled, top_k_mask
from reference.topk import order_keys


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
    full, _ = answer(inputs).target_logits
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


def params_of(inputs: Inputs, plan: SamplePlan) -> SamplingParams:
    """The plan's per-row parameters for these inputs, computed once per Inputs and plan."""
    key = f"sampling {plan!r}"
    if key not in inputs.memo:
        inputs.memo[key] = sampling_params(plan, inputs)
    return inputs.memo[key]
