"""Token-exactness and the kept set against the classic sampler, and what names a failing row.

A failing row is named, in order, by: a token that is no token; a fault model that survives its experiments
(:mod:`properties.sampling.experiments`); an overflow of ``logit / T`` that made the tie; a tie resolved in another
order; the row right alone (:mod:`properties.sampling.row_evidence`); the first stage the reported kept set departs
at (it comes before the draw); the mask that drops a token outside the support; and last the draw's stage
(:mod:`properties.sampling.stages`).
"""

from __future__ import annotations

import torch
from hypothesis import event
from hypothesis.control import currently_in_test_context

from properties.argmax.diagnosis import non_token_rule
from properties.cases.case import Inputs
from properties.cases.plans import SamplePlan, plan_fields
from properties.failures import fail, repro_extra
from properties.sampling.checks import (
    SAMPLE_EXACT,
    SAMPLE_KEPT,
    SAMPLE_WRONG,
    Drawn,
    agreement,
    boundary,
    divergent,
    noise_of,
    observed,
    oracle_sample,
    run_sampler,
    same_kept,
    same_token,
    subject_of,
)
from properties.sampling.experiments import name_fault
from properties.sampling.faults import tie_rule
from properties.sampling.row_evidence import alone_rule, kept_rule, outside_named, reported_stage
from properties.sampling.stages import draw_stage
from properties.sampling.support_rules import GREEDY_WRONG, outside_rule, row_overflowed, support
from reference.sampling import Sample, SamplingParams
from sharded.impls import Impl


def _row_lines(params: SamplingParams, row: int, want: int, got: int, kept: torch.Tensor) -> list[str]:
    t, k, p = float(params.temperature[row]), int(params.top_k[row]), float(params.top_p[row])
    where = lambda tok: "kept" if tok < kept.shape[1] and bool(kept[row, tok]) else "masked"  # noqa: E731
    return [
        f"row {row}: temperature {t:g}, top_k {k}, top_p {p!r}, seed {int(params.seed[row])}",
        f"row {row}: expected {want} ({where(want)}), got {got} ({where(got)})",
    ]


def check_sample_exact(impl: Impl, inputs: Inputs, plan: SamplePlan) -> None:
    with repro_extra(sampling=plan_fields(plan)):
        drawn, params = run_sampler(impl, inputs, plan, SAMPLE_EXACT)
        noise = noise_of(impl)
        want = oracle_sample(inputs, params, noise)
        tokens, expected = drawn.tokens.cpu(), want.tokens.cpu()
        wrong = []
        for row in (tokens != expected).nonzero().flatten().tolist():
            if divergent(inputs, params, want, row, int(tokens[row])):
                if currently_in_test_context():
                    event("named divergence: all -inf row with d2t, sampled")
            else:
                wrong.append(row)
        if not wrong:
            return
        row, got = wrong[0], int(tokens[wrong[0]])
        judged = [r for r in range(inputs.case.batch) if r in wrong or int(tokens[r]) == int(expected[r])]
        rule = row_rule(impl, inputs, params, drawn, want, row, judged, SAMPLE_EXACT)
        lines = _row_lines(params.to("cpu"), row, int(expected[row]), got, want.kept.cpu())
        fail(rule, lines, impl, inputs, SAMPLE_EXACT)


def row_rule(
    impl: Impl,
    inputs: Inputs,
    params: SamplingParams,
    drawn: Drawn,
    want: Sample,
    row: int,
    judged: list[int],
    prop: str,
) -> str:
    """The rule for ``row``, whose token is not the classic sampler's (given the same noise), in the order of the
    module docstring; ``judged``: the rows the fault models must reproduce."""
    tokens, noise = drawn.tokens.cpu(), noise_of(impl)
    got, expected = int(tokens[row]), int(want.tokens[row])
    subject, seen = subject_of(impl, inputs, prop), observed(inputs, params, drawn)
    rule = non_token_rule(inputs, got) or name_fault(inputs, params, subject, seen, judged, same_token)
    allowed = support(inputs, params) | boundary(inputs, params.to("cpu"))
    outside = not (0 <= got < allowed.shape[1] and bool(allowed[row, got]))
    if rule is None and outside and row_overflowed(inputs, params, row):  # +inf ties the temperature made
        rule = outside_rule(inputs, params, row, got)
    rule = rule or tie_rule(inputs, params, noise, [row], tokens, want)  # as the fallbacks: the row shown
    if rule is None:

        def right(one: Inputs, mine: SamplingParams, alone: Drawn) -> bool:
            return int(alone.tokens.cpu()[0]) == int(oracle_sample(one, mine, noise).tokens[0])

        rule = alone_rule(impl, inputs, params, row, prop, right)
    if rule is None:  # the kept set the sampler reports comes before the draw: where it differs, its stage
        rule = reported_stage(impl, inputs, params, drawn, row, prop)
    if rule is None and outside:  # a token no noise draws: named by the top-k experiment, or what drops it
        rule = outside_named(impl, inputs, params, drawn, row, got, prop)
    if rule is None:
        rule = GREEDY_WRONG if bool(params.greedy[row]) else SAMPLE_WRONG
    if rule == SAMPLE_WRONG:  # both kept: the draw's stage, with the two scores
        rule = draw_stage(inputs, params, noise, row, got, expected) or rule
    return rule


def check_kept_set(impl: Impl, inputs: Inputs, plan: SamplePlan) -> None:
    """The kept ids of every sampled row are the classic kept set's, but for tokens within rounding of top-p's
    boundary (:func:`top_p_slack`).  A sampler that reports no kept set (``None``) is judged by its tokens only."""
    with repro_extra(sampling=plan_fields(plan)):
        drawn, params = run_sampler(impl, inputs, plan, SAMPLE_KEPT)
        if drawn.kept is None:
            if currently_in_test_context():
                event("kept set not reported")
            return
        noise = noise_of(impl)
        want = oracle_sample(inputs, params, noise)
        classic, seen = want.kept.cpu(), observed(inputs, params, drawn)
        ids = drawn.kept.cpu()
        outside = ids[ids >= classic.shape[1]]
        if outside.numel():
            fail(f"kept set holds id {int(outside[0])} beyond the target vocabulary", [], impl, inputs, SAMPLE_KEPT)
        batch = range(inputs.case.batch)
        judged = [r for r in batch if not divergent(inputs, params, want, r, int(seen.tokens[r]))]
        differ = (seen.kept != classic) & ~seen.loose
        wrong = [r for r in judged if bool(differ[r].any())]
        if not wrong:
            return
        row, got = wrong[0], seen.kept[wrong[0]]
        subject = subject_of(impl, inputs, SAMPLE_KEPT)
        rule = name_fault(inputs, params, subject, seen, judged, agreement(impl, same_kept))
        if rule is None and all(bool(params.greedy[r]) for r in wrong):  # a greedy row keeps its token alone
            rule = tie_rule(inputs, params, noise, wrong, seen.tokens, want)
        params = params.to("cpu")
        missing, extra = (
            (classic[row] & ~got & differ[row]).nonzero().flatten(),
            (got & ~classic[row] & differ[row]).nonzero(),
        )
        lines = [
            f"row {row}: temperature {float(params.temperature[row]):g}, top_k {int(params.top_k[row])}, "
            f"top_p {float(params.top_p[row])!r}",
            f"row {row}: {len(missing)} kept id(s) missing (first {missing[:5].tolist()}), "
            f"{len(extra)} dropped id(s) kept (first {extra.flatten()[:5].tolist()})",
        ]
        rule = rule or kept_rule(impl, inputs, params, row, got, seen.loose[row], SAMPLE_KEPT)
        fail(rule, lines, impl, inputs, SAMPLE_KEPT)
