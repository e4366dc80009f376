"""Experiments that tell apart the fault models fitting one run of a sampler, and the naming they decide.

Several models can reproduce one batch: a sampler that treats tiny temperatures as greedy and one that breaks ties
in another order both return the argmax on a tied row; skipping top-p and keeping top-p's boundary token both draw
that token.  So the sampler runs again with one thing changed, and a model keeps its claim only while it predicts
the new tokens (and kept sets, where the sampler reports them) on every judged row:

* **top-k 1, no top-p**: a skipped mask and a mask applied to noised logits part ways;
* **each mask alone** (where a row has both): a fault of one mask shows without the other;
* **temperature 1**: the temperature faults vanish, the noise and mask faults stay;
* **other seeds**: a row taken as greedy keeps its token, a sampled one draws again.

A run that fails (raises, hangs, disagrees across ranks) confirms nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from properties.cases import Inputs
from properties.sampling_faults import Observed, Prediction, Subject, candidates, variant_sample
from reference.sampling import SamplingParams

SALT = 0x5851F42D4C957F2D  # other seeds: each row's seed XOR this, so distinct seeds stay distinct


def probes(params: SamplingParams, masks: frozenset[str], vocab: int) -> list[tuple[str, SamplingParams]]:
    """The experiments that apply to ``params`` and a sampler taking ``masks``, each named, in the order run."""
    sampled = ~params.greedy
    k_on = sampled & (params.top_k > 0) & (params.top_k < vocab)
    p_on = sampled & (params.top_p < 1)
    ones, no_k, no_p = torch.ones_like(params.top_k), torch.zeros_like(params.top_k), torch.ones_like(params.top_p)
    found = []
    if "top_k" in masks:
        found.append(("top-k 1, no top-p", replace(params, top_k=ones, top_p=no_p)))
    if {"top_k", "top_p"} <= masks and bool((k_on & p_on).any()):
        found += [("top-k alone", replace(params, top_p=no_p)), ("top-p alone", replace(params, top_k=no_k))]
    if bool((sampled & (params.temperature != 1)).any()):
        found.append(("temperature 1", replace(params, temperature=sampled.float())))
    found.append(("other seeds", replace(params, seed=params.seed ^ SALT)))
    return found


def matches(prediction: Prediction, seen: Observed, rows: list[int]) -> bool:
    """The model's tokens on every row of ``rows`` (a token rounding may keep or drop aside), and its kept sets
    where the sampler reports them."""
    for row in rows:
        token = int(seen.tokens[row])
        loose = 0 <= token < seen.loose.shape[1] and bool(seen.loose[row, token])
        if token != int(prediction.tokens[row]) and not loose:
            return False
    if seen.kept is None:
        return True
    return not bool(((seen.kept != prediction.kept) & ~seen.loose)[rows].any())


def name_fault(
    inputs: Inputs,
    params: SamplingParams,
    subject: Subject,
    seen: Observed,
    rows: list[int],
    agrees: Callable[[Prediction, int], bool],
) -> str | None:
    """The rule of the first model (in ``MODELS`` order) that reproduces ``rows`` of the run ``seen`` by ``agrees``
    and predicts the sampler in every experiment, or None."""
    found = candidates(inputs, params, subject, seen, rows, agrees)
    for _name, probe in probes(params.to("cpu"), subject.masks, inputs.vocab) if found else ():
        again = subject.rerun(probe)
        if again is None:
            return None
        found = [(r, v) for r, v in found if matches(variant_sample(inputs, probe, subject.noise, v), again, rows)]
        if not found:
            return None
    return found[0][0] if found else None
