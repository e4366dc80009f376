"""What a failing row's own evidence and experiments say before its token is named by the mask that drops it.

A token outside the support is where the classic path drops it, not necessarily where the sampler went wrong.  So,
in order: the row run alone (right alone, the row took something of its batchmates: a temperature, a mask); the
kept set the sampler reports (where it already differs from the classic one, the first stage it departs at,
:func:`properties.sampling.stages.kept_stage`); the row with top-p off (a token outside top-k then shows top-k's
fault, whatever the noise); and only then the mask or the special value that drops the token
(:func:`properties.sampling.support_rules.outside_rule`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from properties.cases.case import Inputs
from properties.failures import ImplementationHung, PropertyFailure
from properties.oracle import answer
from properties.sampling.checks import (
    Drawn,
    boundary,
    in_support,
    kept_masks,
    noise_key_of,
    observed,
    run_with,
    subject_of,
    token_noise,
)
from properties.sampling.experiments import name_fault
from properties.sampling.stages import kept_stage
from properties.sampling.support_rules import TOP_K_DROPS, outside_rule
from reference.sampling import SamplingParams, kept_mask, scaled, top_k_mask
from sharded.impls import Impl

ROW_TOOK_BATCHMATES = "the row is right alone and wrong beside its batchmates: it took something of theirs"


def _rerun(impl: Impl, inputs: Inputs, params: SamplingParams, prop: str) -> Drawn | None:
    try:
        return run_with(impl, inputs, params, prop)
    except (PropertyFailure, ImplementationHung):  # a run that fails confirms nothing
        return None


def _kept_differs(
    inputs: Inputs, params: SamplingParams, kept_ids: torch.Tensor, row: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``row``'s reported kept set (bool ``[V]``) and top-p's rounding slack there, where the set differs from the
    classic kept set outside that slack; None where it does not."""
    full, mapped = answer(inputs).target_logits
    cpu = params.to("cpu")
    x = scaled(full[row : row + 1].cpu(), cpu.rows([row]))
    classic = (kept_mask(x, cpu.rows([row])) & mapped.cpu())[0]
    got = kept_masks(kept_ids[row : row + 1], x.shape[1])[0]
    loose = boundary(inputs, cpu)[row]
    return (got, loose) if bool(((got != classic) & ~loose).any()) else None


def _kept_right(inputs: Inputs, params: SamplingParams, drawn: Drawn) -> bool:
    """Whether the one row of ``inputs`` reports the classic kept set (top-p's slack aside)."""
    if drawn.kept is None:
        return False
    return bool(params.greedy[0]) or _kept_differs(inputs, params, drawn.kept, 0) is None


def alone_rule(
    impl: Impl,
    inputs: Inputs,
    params: SamplingParams,
    row: int,
    prop: str,
    right: Callable[[Inputs, SamplingParams, Drawn], bool],
    by_noise: bool = True,
) -> str | None:
    """:data:`ROW_TOOK_BATCHMATES` where ``row`` run alone gives what ``right(inputs, params, drawn)`` accepts; None
    where it is wrong alone too, or cannot run.  Where ``right`` judges what the noise draws (``by_noise``: a token,
    its log-probability; not a kept set), also None for noise not declared per row (``fn.noise_key`` other than
    ``"id"``): alone, such a row draws other noise, and a right token would show nothing."""
    if inputs.case.batch == 1 or (by_noise and noise_key_of(impl) != "id"):
        return None
    one, mine = inputs.with_rows([row]), params.rows([row])
    drawn = _rerun(impl, one, mine, prop)
    if drawn is None or not right(one, mine, drawn):
        return None
    return f"{ROW_TOOK_BATCHMATES}: alone it drew {int(drawn.tokens.cpu()[0])}"


def own_model(
    impl: Impl, inputs: Inputs, params: SamplingParams, drawn: Drawn, judged: list[int], prop: str
) -> str | None:
    """For a sampler with its own randomness: the fault model whose support holds the token of every row of
    ``judged`` and whose kept set is the one the sampler reports, in this run and in every experiment that ran
    (:func:`properties.sampling.experiments.name_fault`); None where none does, or the noise is declared."""
    if token_noise(impl):
        return None
    subject = subject_of(impl, inputs, prop)
    return name_fault(inputs, params, subject, observed(inputs, params, drawn), judged, in_support)


def without_top_p(impl: Impl, inputs: Inputs, params: SamplingParams, row: int, prop: str) -> Drawn | None:
    """The batch rerun with top-p off, where ``row`` samples with top-p on (the experiment that shows top-k's
    output: its kept set, or a token top-k drops); None where it does not apply or cannot run."""
    cpu = params.to("cpu")
    if bool(cpu.greedy[row]) or float(cpu.top_p[row]) >= 1:
        return None
    return _rerun(impl, inputs, replace(params, top_p=torch.ones_like(params.top_p)), prop)


def kept_rule(
    impl: Impl, inputs: Inputs, params: SamplingParams, row: int, got: torch.Tensor, loose: torch.Tensor, prop: str
) -> str:
    """:func:`properties.sampling.stages.kept_stage` for ``row``'s reported kept set ``got``, with the experiment
    that shows top-k's output where the sampler reports a kept set with top-p off."""
    alone = alone_rule(impl, inputs, params, row, prop, _kept_right, by_noise=False)
    if alone:
        return alone
    again = without_top_p(impl, inputs, params, row, prop)
    shown = None if again is None or again.kept is None else kept_masks(again.kept[row : row + 1], got.numel())[0]
    return kept_stage(inputs, params, row, got, loose, shown)


def reported_stage(impl: Impl, inputs: Inputs, params: SamplingParams, drawn: Drawn, row: int, prop: str) -> str | None:
    """The first stage the sampler's reported kept set departs at, where it reports one that differs from the
    classic kept set on ``row`` (tokens within top-p's rounding slack aside); else None."""
    if drawn.kept is None or bool(params.greedy[row]):
        return None
    differs = _kept_differs(inputs, params, drawn.kept, row)
    return None if differs is None else kept_rule(impl, inputs, params, row, *differs, prop)


def top_k_experiment(impl: Impl, inputs: Inputs, params: SamplingParams, row: int, prop: str) -> str | None:
    """:data:`TOP_K_DROPS` where the batch rerun with top-p off draws, on ``row``, a token top-k drops: then top-k is
    at fault whatever top-p does (one such draw is proof, whatever the noise; none proves nothing)."""
    cpu = params.to("cpu")
    full = answer(inputs).target_logits[0][row : row + 1].cpu()
    if not 0 < int(cpu.top_k[row]) < full.shape[1]:
        return None
    drawn = without_top_p(impl, inputs, params, row, prop)
    if drawn is None:
        return None
    token = int(drawn.tokens.cpu()[row])
    by_k = top_k_mask(scaled(full, cpu.rows([row])), cpu.top_k[row : row + 1])
    inside = 0 <= token < by_k.shape[1] and bool(by_k[0, token])
    return None if inside else f"{TOP_K_DROPS} (top-p off, it drew {token})"


def outside_named(
    impl: Impl, inputs: Inputs, params: SamplingParams, drawn: Drawn, row: int, token: int, prop: str
) -> str:
    """The rule for ``row``'s token outside its support, once the row alone has been tried: the reported kept set's
    stage, the top-k experiment, else what drops the token."""
    return (
        reported_stage(impl, inputs, params, drawn, row, prop)
        or top_k_experiment(impl, inputs, params, row, prop)
        or outside_rule(inputs, params, row, token)
    )
