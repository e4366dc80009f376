"""The support property: every sampled token is one the classic sampler can draw, whatever the noise.

Token-exactness needs the sampler's noise; a sampler with its own randomness (one key per step, noise keyed by
candidate position) cannot be judged token for token, but its every token must still lie in the classic draw's
support (:func:`reference.sampling.support_mask`), on every example.  A token outside it is named by the fault
model whose support holds every draw, in every experiment (:func:`properties.sampling.row_evidence.own_model`),
else by what drops it: top-k, top-p, a NaN or ``+inf`` that must win, a probability of 0.
"""

from __future__ import annotations

from hypothesis import event
from hypothesis.control import currently_in_test_context

from properties.cases.case import Inputs
from properties.cases.plans import SamplePlan, plan_fields
from properties.failures import fail, repro_extra
from properties.sampling.checks import (
    Drawn,
    boundary,
    divergent,
    noise_key_of,
    noise_of,
    oracle_sample,
    run_sampler,
    token_noise,
)
from properties.sampling.exactness import row_rule
from properties.sampling.row_evidence import alone_rule, outside_named, own_model
from properties.sampling.support_rules import support
from reference.sampling import SamplingParams
from sharded.impls import Impl

SAMPLE_SUPPORT = "support: every sampled token is one the classic sampler can draw, whatever the noise"


def check_support(impl: Impl, inputs: Inputs, plan: SamplePlan) -> tuple[Drawn, SamplingParams]:
    """Every row's token lies in its support; a token within top-p's rounding slack of the boundary counts as in,
    and so does the named divergence of an all ``-inf`` row with d2t."""
    with repro_extra(sampling=plan_fields(plan)):
        drawn, params = run_sampler(impl, inputs, plan, SAMPLE_SUPPORT)
        allowed = support(inputs, params) | boundary(inputs, params.to("cpu"))
        tokens, vocab, want = drawn.tokens.cpu(), allowed.shape[1], None
        for row, token in enumerate(tokens.tolist()):
            if 0 <= token < vocab and bool(allowed[row, token]):
                continue
            want = want or oracle_sample(inputs, params, noise_of(impl))  # once, and only where a row is outside
            if divergent(inputs, params, want, row, token):
                continue
            p = params.to("cpu")
            lines = [
                f"row {row}: temperature {float(p.temperature[row]):g}, top_k {int(p.top_k[row])}, "
                f"top_p {float(p.top_p[row])!r}",
                f"row {row}: got {token}; the support holds {allowed[row].sum()} id(s), "
                f"first {allowed[row].nonzero().flatten()[:5].tolist()}",
            ]
            judged = [r for r in range(len(tokens)) if not divergent(inputs, params, want, r, int(tokens[r]))]
            if token_noise(impl):  # named as exactness names it: the symptom must not hide the fault behind it
                rule = row_rule(impl, inputs, params, drawn, want, row, judged, SAMPLE_SUPPORT)
            else:  # the row alone, the fault model whose support holds every draw, else what drops the token
                rule = (
                    alone_rule(impl, inputs, params, row, SAMPLE_SUPPORT, _inside)
                    or own_model(impl, inputs, params, drawn, judged, SAMPLE_SUPPORT)
                    or outside_named(impl, inputs, params, drawn, row, token, SAMPLE_SUPPORT)
                )
            fail(rule, lines, impl, inputs, SAMPLE_SUPPORT)
        return drawn, params


def _inside(inputs: Inputs, params: SamplingParams, drawn: Drawn) -> bool:
    """Whether the one row of ``inputs`` may draw the token it drew."""
    token = int(drawn.tokens.cpu()[0])
    allowed = support(inputs, params) | boundary(inputs, params.to("cpu"))
    return 0 <= token < allowed.shape[1] and bool(allowed[0, token])


def check_named_divergence(impl: Impl, inputs: Inputs, plan: SamplePlan) -> None:
    """Token-exactness for a sampler whose noise no token noise can declare (``fn.noise_key``, such as ``"candidate
    position"``): greedy rows exactly, sampled rows within the support; a sampled row whose token is not the one the
    contract's noise draws is the named divergence, counted as a Hypothesis event and never a failure."""
    drawn, params = check_support(impl, inputs, plan)
    want = oracle_sample(inputs, params, noise_of(impl)).tokens.cpu()
    if currently_in_test_context() and bool(((drawn.tokens.cpu() != want) & ~params.greedy.cpu()).any()):
        event(f"named divergence: noise keyed by {noise_key_of(impl)}, not by token id")
