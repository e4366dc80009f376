"""The sampling log-probability property: the chosen token's raw and processed log-probabilities against
``log_softmax`` in float64, at the sampler's own token, within :data:`LOG_PROB_ULPS` float32 ulps."""

from __future__ import annotations

import math

import torch
from hypothesis import event
from hypothesis.control import currently_in_test_context

from properties.cases.case import Inputs
from properties.cases.plans import SamplePlan, plan_fields
from properties.failures import fail, repro_extra
from properties.oracle import answer
from properties.sampling.checks import (
    Drawn,
    agreement,
    boundary,
    in_support,
    kept_masks,
    noise_of,
    observed,
    oracle_sample,
    run_sampler,
    subject_of,
)
from properties.sampling.experiments import name_fault
from properties.sampling.faults import PER_SHARD, Observed
from properties.sampling.row_evidence import alone_rule, kept_rule, own_model
from properties.sampling.stages import log_prob_stage
from properties.sampling.variants import Prediction
from reference.sampling import SamplingParams, log_probs, scaled
from sharded.impls import Impl

SAMPLE_LOG_PROBS = "log-probabilities within 8 float32 ulps of log_softmax in float64"
LOG_PROB_ULPS = 8


def ulps_apart(got: torch.Tensor, want: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    """How many float32 ulps of ``magnitude`` lie between ``got`` and the float64 ``want``; 0 where both are NaN,
    infinite where only one is."""
    ulp = torch.finfo(torch.float32).eps * magnitude.clamp(min=1.0)
    gap = (got.double() - want).abs() / ulp
    both = got.isnan() & want.isnan()
    one = got.isnan() ^ want.isnan()
    return torch.where(both, 0.0, torch.where(one, math.inf, gap.nan_to_num(nan=0.0, posinf=math.inf)))


def _magnitudes(full: torch.Tensor, x: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """float64 ``[B, 2]``: the larger of the exact log-prob and the row's largest finite raw logit (processed: ``x``),
    the size of the numbers a float32 log-softmax subtracts."""
    largest = []
    for t in (full.float(), x):
        finite = t.double().masked_fill(~torch.isfinite(t), 0.0).abs().amax(dim=1)
        largest.append(finite)
    return torch.maximum(exact.abs().nan_to_num(0.0, 0.0, 0.0), torch.stack(largest, dim=1))


def same_log_probs(prediction: Prediction, seen: Observed, row: int) -> bool:
    """Agreement for the fault models: the model's token on ``row``, and both its log-probabilities within
    :data:`LOG_PROB_ULPS` of the run's."""
    if int(prediction.tokens[row]) != int(seen.tokens[row]):
        return False
    return _log_probs_are(seen, row, prediction.log_probs[row : row + 1])


def own_log_probs(prediction: Prediction, seen: Observed, row: int) -> bool:
    """:func:`same_log_probs` for a sampler with its own randomness: the row's token in the model's support, its
    kept set the model's (:func:`in_support`), and both log-probabilities the model's at that token."""
    if not in_support(prediction, seen, row):
        return False
    cut = slice(row, row + 1)
    mine = seen.logits[cut]
    return _log_probs_are(
        seen, row, log_probs(mine, prediction.x[cut], prediction.kept[cut], seen.tokens[cut], prediction.greedy[cut])
    )


def _log_probs_are(seen: Observed, row: int, want: torch.Tensor) -> bool:
    """Both of the run's log-probabilities on ``row`` within :data:`LOG_PROB_ULPS` of ``want`` (float64 ``[1, 2]``);
    True where the run reports none."""
    if seen.log_probs is None:
        return True
    mine = seen.logits[row : row + 1]
    size = _magnitudes(mine, scaled(mine, seen.params.rows([row])), want)[0]
    return bool((ulps_apart(seen.log_probs[row], want[0], size) <= LOG_PROB_ULPS).all())


def _first_wrong(inputs: Inputs, params: SamplingParams, drawn: Drawn, noise) -> tuple[int, int, float, float] | None:
    """The first (row, which, expected, ulps apart) whose log-probability (``which``: 0 raw, 1 processed) lies more
    than :data:`LOG_PROB_ULPS` from the exact one at the sampler's own token; None where all are within."""
    want = oracle_sample(inputs, params, noise)
    params, tokens = params.to("cpu"), drawn.tokens.cpu()
    if not bool(((tokens >= 0) & (tokens < want.kept.shape[1])).all()):
        return None  # not a token: the exactness property's failure
    full, _ = answer(inputs).target_logits
    x = scaled(full, params)
    exact = log_probs(full, x, want.kept.cpu(), tokens, params.greedy)  # at its own tokens
    apart = ulps_apart(drawn.log_probs.cpu(), exact, _magnitudes(full, x, exact))
    bad = (apart > LOG_PROB_ULPS).nonzero()
    if not bad.numel():
        return None
    row, which = (int(v) for v in bad[0])
    return row, which, float(exact[row, which]), float(apart[row, which])


def check_log_probs(impl: Impl, inputs: Inputs, plan: SamplePlan) -> None:
    """The chosen token's raw and processed log-probabilities within :data:`LOG_PROB_ULPS` float32 ulps of the
    larger of the exact value and the row's largest finite logit (or ``x``) of ``log_softmax`` in float64."""
    with repro_extra(sampling=plan_fields(plan)):
        drawn, params = run_sampler(impl, inputs, plan, SAMPLE_LOG_PROBS)
        if drawn.log_probs is None:
            if currently_in_test_context():
                event("log-probabilities not reported")
            return
        noise = noise_of(impl)
        wrong = _first_wrong(inputs, params, drawn, noise)
        if wrong is None:
            return
        row, which, expected, apart = wrong
        got = float(drawn.log_probs[row, which])
        fail(
            _rule(impl, inputs, params, drawn, row, which),
            [f"row {row}: expected {expected!r}, got {got!r} ({apart:.3g} ulps)"],
            impl,
            inputs,
            SAMPLE_LOG_PROBS,
        )


def _rule(impl: Impl, inputs: Inputs, params: SamplingParams, drawn: Drawn, row: int, which: int) -> str:
    """What names a log-probability off on ``row``: a fault model, the row right alone, the value over the sampler's
    own kept set where that set differs (named by the stage it departs at), what else the value equals (at another
    index, before a mask or the temperature), else the log-probability's own stage."""
    kind, noise = ("raw", "processed")[which], noise_of(impl)
    subject, seen = subject_of(impl, inputs, SAMPLE_LOG_PROBS), observed(inputs, params, drawn)
    agrees = agreement(impl, same_log_probs, own_log_probs)
    model = name_fault(inputs, params, subject, seen, list(range(inputs.case.batch)), agrees)
    if model is not None:
        return model if model in PER_SHARD.values() else f"{kind} log-probability: {model}"
    alone = alone_rule(
        impl, inputs, params, row, SAMPLE_LOG_PROBS, lambda i, p, d: _first_wrong(i, p, d, noise) is None
    )
    if alone:
        return alone
    cpu, token = params.to("cpu"), int(drawn.tokens.cpu()[row])
    full = answer(inputs).target_logits[0][row : row + 1].cpu()
    x = scaled(full, cpu.rows([row]))
    classic = oracle_sample(inputs, params, noise).kept.cpu()[row]
    got = drawn.log_probs.cpu()[row, which : which + 1]

    def close(value: float) -> bool:
        want = torch.tensor([value], dtype=torch.float64)
        return bool(ulps_apart(got, want, _magnitudes(full, x, want[None].expand(1, 2))[0, which : which + 1])[0]
                    <= LOG_PROB_ULPS)  # fmt: skip

    if which == 1 and drawn.kept is not None:
        own = kept_masks(drawn.kept[row : row + 1], x.shape[1])[0]
        loose = boundary(inputs, cpu)[row]
        over_own = torch.log_softmax(x.double().masked_fill(~own[None], -math.inf), dim=1)[0, token]
        if bool(((own != classic) & ~loose).any()) and close(float(over_own)):
            batch = list(range(inputs.case.batch))
            stage = own_model(impl, inputs, params, drawn, batch, SAMPLE_LOG_PROBS) or kept_rule(
                impl, inputs, params, row, own, loose, SAMPLE_LOG_PROBS
            )
            return f"processed log-probability over its own kept set: {stage}"
    named = log_prob_stage(inputs, params, classic, row, token, which, close)
    if named:
        return named
    return f"{kind} log-probability more than {LOG_PROB_ULPS} float32 ulps from log_softmax in float64"
