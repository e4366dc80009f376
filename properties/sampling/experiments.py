"""Experiments that tell apart the fault models fitting one run of a sampler, and the naming they decide.

Several models can reproduce one batch: a sampler that treats tiny temperatures as greedy and one that breaks ties
in another order both return the argmax on a tied row; skipping top-p and keeping top-p's boundary token both draw
that token.  So the sampler runs again with one thing changed, and a model keeps its claim only while it predicts
what the property judges (its tokens, kept sets or log-probabilities) on every judged row:

* **top-k 1, no top-p**: a skipped mask and a mask applied to noised logits part ways;
* **each mask alone** (where a row has both): a fault of one mask shows without the other;
* **temperature 1**: the temperature faults vanish, the noise and mask faults stay;
* **other seeds**: a row taken as greedy keeps its token, a sampled one draws again;
* **more candidates** (a sampler that declares them): a fault of the candidates moves with C, one of the masks
  does not.

Where an experiment has several forms (which seeds, which C), the one on which the fitting models disagree on the
most rows is run: the experiment is chosen to separate them.  A run that fails (raises, hangs, disagrees across
ranks) is skipped; a model is named only if at least one experiment ran and it predicted all that ran.

A sampler with its own randomness (no token noise declares it) cannot be predicted token by token: a model there
must hold every draw in its support, and one more experiment asks that its distribution fit: the row where the
model's distribution departs most from the classic one (with the row's parameters, or at T = 1), drawn alone
:data:`DRAWS` times with other seeds, against softmax of the model's ``x`` over its kept set (chi-square, p at least
:data:`~properties.sampling.chi_square.FALSE_ALARM`).  A model whose support is wider than the sampler's (top-p
skipped, for a sampler whose nucleus is taken at another temperature) fails it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from properties.cases.case import Inputs
from properties.sampling.chi_square import FALSE_ALARM, chi_square
from properties.sampling.faults import Agrees, Observed, Subject, candidates
from properties.sampling.variants import Prediction, Variant, holds, variant_sample
from reference.sampling import SamplingParams, masses

# other seeds: each row's seed XOR one of these (distinct seeds stay distinct; each below 2**63, an int64 as is)
SALTS = (0x5851F42D4C957F2D, 0x14057B7EF767814F, 0x2545F4914F6CDD1D, 0x61C8864680B583EB)
MORE_CANDIDATES = (2, 4, 16)  # C times these
DRAWS = 400  # a sampler with its own randomness: the row that parts a model from the classic one, drawn alone
MIN_SPLIT = 0.2  # that row's total variation between the two: at 400 draws, a gap chi-square shows


def probes(params: SamplingParams, subject: Subject, vocab: int) -> list[tuple[str, list[SamplingParams]]]:
    """The experiments that apply to ``params`` and the sampler, each named with its forms, in the order run."""
    sampled = ~params.greedy
    k_on = sampled & (params.top_k > 0) & (params.top_k < vocab)
    p_on = sampled & (params.top_p < 1)
    ones, no_k, no_p = torch.ones_like(params.top_k), torch.zeros_like(params.top_k), torch.ones_like(params.top_p)
    found = []
    if "top_k" in subject.masks:
        found.append(("top-k 1, no top-p", [replace(params, top_k=ones, top_p=no_p)]))
    if {"top_k", "top_p"} <= subject.masks and bool((k_on & p_on).any()):
        found += [("top-k alone", [replace(params, top_p=no_p)]), ("top-p alone", [replace(params, top_k=no_k)])]
    if bool((sampled & (params.temperature != 1)).any()):
        found.append(("temperature 1", [replace(params, temperature=sampled.float())]))
    found.append(("other seeds", [replace(params, seed=params.seed ^ salt) for salt in SALTS]))
    if subject.candidates:
        found.append(("more candidates", [replace(params, candidates=params.candidates * m) for m in MORE_CANDIDATES]))
    return found


def _separating(
    inputs: Inputs, forms: list[SamplingParams], noise, models: list[Variant], rows: list[int], kept: bool
) -> SamplingParams:
    """The form on which the models' predictions differ on the most rows (the first where none does)."""
    if len(forms) == 1 or len(models) < 2:
        return forms[0]

    def split(form: SamplingParams) -> int:
        said = [variant_sample(inputs, form, noise, v) for v in models]
        tokens = torch.stack([p.tokens for p in said])[:, rows]
        differ = (tokens != tokens[:1]).any(dim=0)
        if kept:
            masks = torch.stack([p.kept for p in said])[:, rows]
            differ |= (masks != masks[:1]).any(dim=2).any(dim=0)
        return int(differ.sum())

    return max(forms, key=split)


def _predicts(
    inputs: Inputs, probe: SamplingParams, subject: Subject, variant: Variant, again: Observed, rows, agrees: Agrees
) -> bool:
    prediction = variant_sample(inputs, probe, subject.noise, variant)
    return all(agrees(prediction, again, r) for r in rows)


def name_fault(
    inputs: Inputs,
    params: SamplingParams,
    subject: Subject,
    seen: Observed,
    rows: list[int],
    agrees: Agrees,
) -> str | None:
    """The rule of the first model (in ``MODELS`` order) that reproduces ``rows`` of the run ``seen`` by ``agrees``
    and predicts the sampler, by the same measure, in every experiment that ran (at least one), or None."""
    found = candidates(inputs, params, subject, seen, rows, agrees)
    ran = False
    for _name, forms in probes(params.to("cpu"), subject, inputs.vocab) if found else ():
        probe = _separating(inputs, forms, subject.noise, [v for _, v in found], rows, seen.kept is not None)
        again = subject.rerun(probe)
        if again is None:
            continue
        ran = True
        found = [(r, v) for r, v in found if _predicts(inputs, probe, subject, v, again, rows, agrees)]
        if not found:
            return None
    if found and ran and subject.own_randomness:
        found = [(r, v) for r, v in found if _draws_fit(inputs, params, subject, seen, rows, v)]
    return found[0][0] if found and ran else None


def _draws_fit(
    inputs: Inputs, params: SamplingParams, subject: Subject, seen: Observed, rows: list[int], variant: Variant
) -> bool:
    """Whether the sampler's draws fit ``variant``'s distribution where it departs most from the classic one: of the
    sampled rows of ``rows``, with their parameters or at T = 1 (where a skipped mask's tokens carry their mass), the
    row and form whose two distributions lie furthest apart (total variation), drawn alone :data:`DRAWS` times
    (seeds ``seed + 1 ... seed + DRAWS``).  True where no row parts them by :data:`MIN_SPLIT`: nothing to see."""
    sampled = ~params.greedy.cpu()
    forms = [params.to("cpu")]
    if bool((sampled & (params.temperature.cpu() != 1)).any()):
        forms.append(replace(forms[0], temperature=sampled.float()))
    split, row, at = 0.0, None, None
    for form in forms:
        said = [variant_sample(inputs, form, subject.noise, v) for v in (variant, Variant())]
        apart = _apart(*said)
        for r in rows:
            if bool(sampled[r]) and float(apart[r]) > split:
                split, row, at = float(apart[r]), r, form
    if row is None or split < MIN_SPLIT or subject.draw is None:
        return True
    one, mine = inputs.with_rows([row] * DRAWS), at.rows([row] * DRAWS)
    mine = replace(mine, seed=mine.seed + torch.arange(1, DRAWS + 1))
    return _fits(one, mine, subject, variant, seen.loose[row])


def _distribution(p: Prediction) -> torch.Tensor:
    """float64 ``[B, V]``: softmax of the model's ``x`` over its kept set; its support's one token where it draws
    one (a NaN, a ``+inf``, a greedy row)."""
    e = masses(p.x, p.kept)
    one = p.greedy.unsqueeze(1) | (p.support.sum(dim=1, keepdim=True) <= 1) | ~(e.sum(dim=1, keepdim=True) > 0)
    return torch.where(one, p.support.double(), e / e.sum(dim=1, keepdim=True).clamp(min=1e-300))


def _apart(a: Prediction, b: Prediction) -> torch.Tensor:
    """float64 ``[B]``: the total variation between two models' distributions, row by row."""
    return 0.5 * (_distribution(a) - _distribution(b)).abs().sum(dim=1)


def _fits(one: Inputs, form: SamplingParams, subject: Subject, variant: Variant, loose: torch.Tensor) -> bool:
    """Whether the sampler's draws of ``one`` (a row repeated) with ``form`` fit ``variant``'s distribution: every
    draw in its support (or within top-p's slack, ``loose``), and by chi-square; True where the draws cannot run."""
    tokens = subject.draw(one, form)
    if tokens is None:
        return True
    model = variant_sample(one, form, subject.noise, variant)
    if not all(holds(model.support[0], t) or holds(loose, t) for t in tokens.tolist()):
        return False
    probs = _distribution(model)[0]
    ids = (probs > 0).nonzero().flatten().tolist()
    counts = torch.bincount(tokens.clamp(min=0), minlength=probs.numel())
    _, _, log_p = chi_square([int(counts[i]) for i in ids], [float(probs[i]) * len(tokens) for i in ids])
    return log_p >= math.log(FALSE_ALARM)
