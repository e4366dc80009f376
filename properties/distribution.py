"""The distribution property: many pinned seeds, one chi-square test against softmax(logits / T) over the kept set.

Token-exactness trusts the noise an implementation declares; this property does not look at the noise at all. Noise
that repeats across ranks (or across ids) lets some tokens never beat their twins, which shows here however the
noise is declared.  The seeds are pinned, so the verdict never changes between runs; for a sampler with ideal
randomness the test fails with probability below :data:`FALSE_ALARM`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from groups.devices import rank_device
from properties.cases import Case, Inputs
from properties.checks import run_valid
from properties.diagnose import fail, repro_extra
from properties.runner import oracle_target_logits, prepare
from properties.sampling import unpack
from reference.sampling import SamplingParams, kept_mask, masses, scaled
from sharded.impls import Impl

SAMPLE_DISTRIBUTION = "the sampled distribution is softmax(logits / T) over the kept set (chi-square)"
DISTRIBUTION_WRONG = "sampled distribution differs from softmax(logits / T) over the kept set"
FALSE_ALARM = 1e-9
MIN_EXPECTED = 5.0  # the chi-square approximation's usual floor per bin; rarer tokens share one bin
SEED_BASE = 1_000_003  # the pinned seeds: SEED_BASE + draw
# Rows per call: a sampler that takes a second per 1,000 rows answers each call in half a second, a twentieth of the
# default collective timeout, however many draws a case makes.
CHUNK = 500


@dataclass(frozen=True)
class DistributionCase:
    """A one-row head sampled ``draws`` times, one pinned seed per draw."""

    name: str
    case: Case
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    draws: int = 4000

    @property
    def masked(self) -> bool:
        return self.top_k > 0 or self.top_p < 1


DISTRIBUTION_CASES = (
    DistributionCase("tp2", Case(batch=1, hidden=4, vocab=24, tp=2, padding_size=8, weights="normal", seed=1), 1.0),
    DistributionCase(
        "tp4-added-top-k",
        Case(batch=1, hidden=4, vocab=40, tp=4, added=8, padding_size=8, weights="normal", seed=2),
        0.7,
        top_k=10,
    ),
    DistributionCase(
        "tp2-d2t-top-p",
        Case(batch=1, hidden=4, vocab=30, tp=2, padding_size=2, weights="normal", d2t="eagle3", target_extra=20),
        1.5,
        top_p=0.9,
    ),
)

BY_NAME = {d.name: d for d in DISTRIBUTION_CASES}


def upper_gamma_log(a: float, x: float) -> float:
    """``log Q(a, x)``, the regularised upper incomplete gamma function: a series below ``a + 1``, a continued
    fraction (modified Lentz) above, both to float64 precision."""
    if x <= 0:
        return 0.0
    front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-17:
            n += 1
            term *= x / n
            total += term
        return math.log1p(-min(1.0, total * math.exp(front)))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-16:
            break
    return front + math.log(h)


def chi_square(observed: list[int], expected: list[float]) -> tuple[float, int, float]:
    """``(statistic, degrees of freedom, log p-value)`` with tokens expected fewer than :data:`MIN_EXPECTED` times
    pooled into one bin (smallest first, until the pool reaches the floor)."""
    order = sorted(range(len(expected)), key=expected.__getitem__)
    pool_o, pool_e, bins = 0, 0.0, []
    for i in order:
        if pool_e < MIN_EXPECTED and expected[i] < MIN_EXPECTED or 0 < pool_e < MIN_EXPECTED:
            pool_o, pool_e = pool_o + observed[i], pool_e + expected[i]
        else:
            bins.append((observed[i], expected[i]))
    if pool_e > 0:
        bins.append((pool_o, pool_e))
    stat = sum((o - e) ** 2 / e for o, e in bins)
    df = len(bins) - 1
    return stat, df, upper_gamma_log(df / 2, stat / 2) if df > 0 else 0.0


def distribution_inputs(dist: DistributionCase, backend: str) -> tuple[Inputs, SamplingParams]:
    """The case's one row, and the pinned parameters of every draw (seed ``SEED_BASE + draw``)."""
    inputs = prepare(dist.case, backend)
    n = dist.draws
    params = SamplingParams(
        temperature=torch.full((n,), dist.temperature),
        top_k=torch.full((n,), dist.top_k, dtype=torch.int64),
        top_p=torch.full((n,), dist.top_p),
        seed=torch.arange(SEED_BASE, SEED_BASE + n, dtype=torch.int64),
        candidates=64,
    )
    return inputs, params


def draw_all(impl: Impl, inputs: Inputs, params: SamplingParams) -> torch.Tensor:
    """The sampler's tokens for every draw, :data:`CHUNK` rows (the case's row repeated) per call."""
    draws, tokens = params.temperature.shape[0], []
    for start in range(0, draws, CHUNK):
        rows = list(range(start, min(start + CHUNK, draws)))
        part, chunk = inputs.with_rows([0] * len(rows)), params.rows(rows)
        where = lambda kw, chunk=chunk: {**kw, "sampling": chunk.to(rank_device(inputs.device, kw["layout"].rank))}  # noqa: E731
        outs = run_valid(impl, part, SAMPLE_DISTRIBUTION, where)
        drawn = unpack(outs[0])
        got = drawn.tokens.cpu() if drawn is not None and isinstance(drawn.tokens, torch.Tensor) else None
        if got is None or got.shape != (len(rows),):
            fail("sampling output contract: tokens int64 [B] expected", [], impl, part, SAMPLE_DISTRIBUTION)
        tokens.append(got)
    return torch.cat(tokens)


def check_distribution(impl: Impl, dist: DistributionCase) -> None:
    backend = "gloo" if impl.process_bound else "sim"
    inputs, params = distribution_inputs(dist, backend)
    with repro_extra(distribution=dist.name):
        tokens = draw_all(impl, inputs, params)
        full = oracle_target_logits(inputs)[0][:1]
        one = params.rows([0])
        x = scaled(full, one)
        kept = kept_mask(x, one)[0]
        e = masses(x, kept.unsqueeze(0))[0]
        probs = (e / e.sum()).tolist()
        outside = [t for t in tokens.tolist() if not 0 <= t < kept.numel() or not bool(kept[t])]
        if outside:
            fail("sampled a token the masks drop", [f"token {outside[0]}"], impl, inputs, SAMPLE_DISTRIBUTION)
        ids = kept.nonzero().flatten().tolist()
        counts = torch.bincount(tokens, minlength=kept.numel())
        observed = [int(counts[i]) for i in ids]
        expected = [probs[i] * dist.draws for i in ids]
        stat, df, log_p = chi_square(observed, expected)
        if log_p < math.log(FALSE_ALARM):
            worst = sorted(range(len(ids)), key=lambda j: -abs(observed[j] - expected[j]))[:3]
            fail(
                f"{DISTRIBUTION_WRONG}: chi-square p below {FALSE_ALARM:g}",
                [
                    f"{dist.draws} draws, {len(ids)} kept tokens: chi-square {stat:.1f} on {df} degrees of freedom, "
                    f"p = {math.exp(log_p):.3g}",
                    *(f"token {ids[j]}: drawn {observed[j]} times, expected {expected[j]:.1f}" for j in worst),
                ],
                impl,
                inputs,
                SAMPLE_DISTRIBUTION,
            )
