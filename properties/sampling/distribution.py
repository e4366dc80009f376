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
from properties.argmax.checks import run_valid
from properties.cases.case import Case, Inputs
from properties.failures import fail, repro_extra
from properties.harness.runner import prepare
from properties.oracle import answer
from properties.sampling.checks import unpack
from properties.sampling.chi_square import FALSE_ALARM, chi_square
from properties.sampling.support_rules import outside_rule
from reference.sampling import SamplingParams, has_probabilities, kept_mask, masses, scaled, support_mask
from sharded.impls import Impl

SAMPLE_DISTRIBUTION = "the sampled distribution is softmax(logits / T) over the kept set (chi-square)"
DISTRIBUTION_WRONG = "sampled distribution differs from softmax(logits / T) over the kept set"
SEED_BASE = 1_000_003  # the pinned seeds: SEED_BASE + draw
# Rows per call: a sampler that takes a second per 1,000 rows answers each call in half a second, a twentieth of the
# default collective timeout, however many draws a case makes.
CHUNK = 500
CHI_SQUARE = f"chi-square p below {FALSE_ALARM:g}"


Mate = tuple[int, float, int, float]  # a batchmate: (the case's row, temperature, top_k, top_p)


@dataclass(frozen=True)
class DistributionCase:
    """A head's row sampled ``draws`` times, one pinned seed per draw; with ``mates``, each draw beside the case's
    other rows, drawn with their own parameters and seeds (a batch where a row needs the fallback)."""

    name: str
    case: Case
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    draws: int = 4000
    row: int = 0
    mates: tuple[Mate, ...] = ()

    @property
    def masked(self) -> bool:
        return self.top_k > 0 or self.top_p < 1 or any(k > 0 or p < 1 for _, _, k, p in self.mates)


def _head(**fields: object) -> Case:
    return Case(**{"batch": 1, "hidden": 4, "vocab": 40, "tp": 2, "weights": "normal", **fields})


_SPREAD = dict(hidden=6, spread=True)
_FALLBACK = Case(
    batch=4, hidden=6, vocab=300, tp=2, weights="normal", bias=True, specials=("neg_inf_rows",), seed=4, spread=True
)  # row 3 is all -inf; rows 0 to 2 are finite
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
    # the heads below are the edges (tests/test_sampling_edges.py checks each holds what its name says)
    DistributionCase("tp2-tie-at-k", Case(batch=1, vocab=40, tp=2, seed=2, **_SPREAD), 2.0, top_k=3, draws=2000),
    DistributionCase(
        "tp4-top-1-tied-maxima",
        Case(batch=1, vocab=64, tp=4, ties=("across_ranks",), seed=1, **_SPREAD),
        1.0,
        top_k=1,
        draws=2000,
    ),
    DistributionCase(
        "tp2-top-p-exact", _head(seed=1, **_SPREAD), 1e30, top_k=8, top_p=0.5, draws=2000
    ),  # 8 equal masses: p = 4/8
    DistributionCase("tp2-nan", _head(seed=3, bias=True, specials=("nan_ranks",)), 1.0, top_k=5, draws=500),
    DistributionCase("tp2-pos-inf", _head(seed=3, bias=True, specials=("pos_inf",)), 1.0, 4, 0.9, draws=500),
    DistributionCase("tp2-neg-inf", _head(seed=3, bias=True, specials=("neg_inf",)), 1.0, top_k=6, draws=2000),
    # row 1 has no mask: a candidate sampler falls back, an engine that takes only masked rows goes classic
    DistributionCase("tp2-fallback-unmasked", _FALLBACK, 1.0, 5, 0.9, draws=1000, mates=((1, 1.0, 0, 1.0),)),
    # row 3 is all -inf under top-k 1: every candidate ties the k-th value, so the candidates may be incomplete
    DistributionCase("tp2-fallback-all-neg-inf", _FALLBACK, 1.0, 5, 0.9, draws=1000, mates=((3, 1.0, 1, 1.0),)),
)

BY_NAME = {d.name: d for d in DISTRIBUTION_CASES}


def draw_params(dist: DistributionCase, draws: range, mates: bool, vocab: int = 0) -> tuple[list[int], SamplingParams]:
    """The case's rows and the parameters of ``draws``: the judged row (seed ``SEED_BASE + draw``), then each mate
    (seed ``SEED_BASE + (m + 1) * draws + draw``) where ``mates``."""
    rows = [(dist.row, dist.temperature, dist.top_k, dist.top_p), *(dist.mates if mates else ())]
    order = [(d, m, row) for d in draws for m, row in enumerate(rows)]
    params = SamplingParams(
        temperature=torch.tensor([r[1] for _, _, r in order], dtype=torch.float32),
        top_k=torch.tensor([r[2] for _, _, r in order], dtype=torch.int64),
        top_p=torch.tensor([r[3] for _, _, r in order], dtype=torch.float32),
        seed=torch.tensor([SEED_BASE + m * dist.draws + d for d, m, _ in order], dtype=torch.int64),
        candidates=64,
        vocab=vocab,
    )
    return [r[0] for _, _, r in order], params


def draw_all(impl: Impl, inputs: Inputs, dist: DistributionCase, mates: bool, prop: str) -> torch.Tensor:
    """The sampler's token on the judged row for every draw, at most :data:`CHUNK` rows per call."""
    width = 1 + (len(dist.mates) if mates else 0)
    step, tokens = max(1, CHUNK // width), []
    for start in range(0, dist.draws, step):
        vocab = answer(inputs).target_logits[0].shape[1]
        rows, chunk = draw_params(dist, range(start, min(start + step, dist.draws)), mates, vocab)
        part = inputs.with_rows(rows)
        where = lambda kw, c=chunk: {**kw, "sampling": c.to(rank_device(inputs.device, kw["layout"].rank), copy=True)}  # noqa: E731
        drawn = unpack(run_valid(impl, part, prop, where)[0])
        got = drawn.tokens.cpu() if drawn is not None and isinstance(drawn.tokens, torch.Tensor) else None
        if got is None or got.shape != (len(rows),):
            fail("sampling output contract: tokens int64 [B] expected", [], impl, part, prop)
        tokens.append(got[::width])
    return torch.cat(tokens)


def backend_of(impl: Impl) -> str:
    return "gloo" if impl.process_bound else "sim"


def expected(inputs: Inputs, dist: DistributionCase, params: SamplingParams | None = None) -> torch.Tensor:
    """float64 ``[V_target]``: the judged row's classic distribution, softmax(logits / T) over the kept set, or the
    one token a row without probabilities (a NaN, a ``+inf``) always draws; with ``params`` (one row), at those."""
    params = params if params is not None else draw_params(dist, range(1), False)[1]
    one = inputs.with_rows([dist.row])
    full, mapped = answer(one).target_logits
    x = scaled(full, params)
    kept = kept_mask(x, params) & mapped
    if not bool(has_probabilities(x, kept)[0]):
        return support_mask(x, kept)[0].double()
    e = masses(x, kept)[0]
    return e / e.sum()


def _alternatives(dist: DistributionCase) -> list[tuple[str, SamplingParams]]:
    """What else the row might have been drawn with: another temperature (1, or a batchmate's), a mask off or
    one token wider: the parameters a misapplied stage would have used, each named."""
    _, params = draw_params(dist, range(1), False)
    t, k, p = dist.temperature, dist.top_k, dist.top_p
    tried = [(f"T = {other:g}", dict(temperature=other)) for other in sorted({1.0, *(m[1] for m in dist.mates)} - {t})]
    if k > 0:
        tried += [("top-k off", dict(top_k=0)), (f"top-k {k + 1}", dict(top_k=k + 1))]
    if p < 1:
        tried.append(("top-p off", dict(top_p=1.0)))
    if k > 0 and p < 1:
        tried.append(("both masks off", dict(top_k=0, top_p=1.0)))
    named = []
    for name, change in tried:
        t1, k1, p1 = change.get("temperature", t), change.get("top_k", k), change.get("top_p", p)
        named.append((name, SamplingParams(torch.tensor([t1]), torch.tensor([k1]), torch.tensor([p1]), params.seed,
                                           params.candidates, params.vocab)))  # fmt: skip
    return named


def _fits(inputs: Inputs, dist: DistributionCase, counts: torch.Tensor) -> list[str]:
    """The alternatives (:func:`_alternatives`) under which the draws would pass, with their p-values."""
    found = []
    for name, params in _alternatives(dist):
        probs = expected(inputs, dist, params)
        if bool((counts[probs == 0] > 0).any()):
            continue  # a token it never draws was drawn
        ids = probs.nonzero().flatten().tolist()
        _, _, log_p = chi_square([int(counts[i]) for i in ids], [float(probs[i]) * int(counts.sum()) for i in ids])
        if log_p >= math.log(FALSE_ALARM):
            found.append(f"{name} (p = {math.exp(log_p):.3g})")
    return found


def judge(impl: Impl, inputs: Inputs, dist: DistributionCase, tokens: torch.Tensor, prop: str) -> list[str]:
    """``[]`` when ``tokens`` fit the judged row's classic distribution (chi-square), else the lines that say how
    they do not.  A token outside the support fails at once, named by what drops it."""
    probs = expected(inputs, dist)
    outside = [t for t in tokens.tolist() if not 0 <= t < probs.numel() or not float(probs[t]) > 0]
    if outside:
        _, params = draw_params(dist, range(1), False)
        one = inputs.with_rows([dist.row])
        fail(outside_rule(one, params, 0, outside[0]), [f"token {outside[0]}"], impl, inputs, prop)
    ids = probs.nonzero().flatten().tolist()
    counts = torch.bincount(tokens, minlength=probs.numel())
    observed = [int(counts[i]) for i in ids]
    want = [float(probs[i]) * len(tokens) for i in ids]
    stat, df, log_p = chi_square(observed, want)
    if log_p >= math.log(FALSE_ALARM):
        return []
    worst = sorted(range(len(ids)), key=lambda j: -abs(observed[j] - want[j]))[:3]
    tried, fits = [n for n, _ in _alternatives(dist)], _fits(inputs, dist, counts)
    fit = f"the draws fit {' or '.join(fits)}" if fits else f"the draws fit no other T or kept set ({', '.join(tried)})"
    return [
        f"{len(tokens)} draws, {len(ids)} kept tokens: chi-square {stat:.1f} on {df} degrees of freedom, "
        f"p = {math.exp(log_p):.3g}",
        *(
            f"token {ids[j]}: drawn {observed[j]} times, expected {want[j]:.1f} (its share of the kept mass "
            f"{float(probs[ids[j]]):.4g})"
            for j in worst
        ),
        *([fit] if tried else []),
    ]


def check_distribution(impl: Impl, dist: DistributionCase) -> None:
    """The judged row's draws (beside its mates, where the head has them) fit its classic distribution."""
    inputs = prepare(dist.case, backend_of(impl))
    with repro_extra(distribution=dist.name):
        tokens = draw_all(impl, inputs, dist, True, SAMPLE_DISTRIBUTION)
        wrong = judge(impl, inputs, dist, tokens, SAMPLE_DISTRIBUTION)
        if wrong:
            fail(f"{DISTRIBUTION_WRONG}: {CHI_SQUARE}", wrong, impl, inputs, SAMPLE_DISTRIBUTION)
