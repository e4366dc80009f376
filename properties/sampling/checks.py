"""The sampling property bodies: tokens, kept sets and log-probabilities against the classic sampler.

Like :mod:`properties.argmax.checks`, independent of Hypothesis so that meta-tests and repro files reuse them.  The
oracle draws the implementation's declared noise (``fn.noise``) or the contract's, over the whole vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import event
from hypothesis.control import currently_in_test_context

from groups.devices import rank_device
from properties.argmax.checks import run_valid
from properties.argmax.diagnosis import draft_targets, non_token_rule
from properties.argmax.top_k import bitwise_equal
from properties.cases.case import Inputs
from properties.cases.plans import SamplePlan, plan_fields
from properties.failures import ImplementationHung, PropertyFailure, fail, repro_extra
from properties.harness import coverage
from properties.harness.runner import backend_tps
from properties.oracle import answer
from properties.sampling.experiments import name_fault
from properties.sampling.faults import Agrees, Observed, Subject
from properties.sampling.params import params_of
from properties.sampling.variants import Prediction, holds
from reference.sampling import (
    Noise,
    Sample,
    SamplingParams,
    classic_sample,
    gumbel_noise,
    has_probabilities,
    masses,
    scaled,
    top_k_mask,
    top_p_margin,
)
from sharded.impls import Impl

SAMPLE_EXACT = "sampling token-exact with the classic sampler, given the same noise"
SAMPLE_KEPT = "kept set: the classic top-k and top-p kept set, id for id"
SAMPLE_INVARIANCE = "sampling TP invariance and determinism: the same tokens for every tp, run after run"
SAMPLE_WRONG = "sampled token differs from the classic sampler's"
TOP_P_SLACK_ULPS = 16  # float64 ulps of the kept mass, plus 4 per kept token: see top_p_slack


def top_p_slack(kept: int) -> float:
    """The share of the kept mass within which a token's place against ``p`` may round either way.

    Two exact sums of the same ``n`` positive float64 masses, taken in any order, differ by at most ``2(n-1)u``
    of the total (``u = 2**-53``), the mass above a token likewise; each mass is one ``exp`` (1 ulp), or two and a
    product where a rank's maximum shifts it (3 ulps).  ``above < p * total`` then moves by less than
    ``(4n + 16) u`` of the total.
    """
    return (4 * kept + TOP_P_SLACK_ULPS) * 2.0**-53


@dataclass(frozen=True)
class Drawn:
    """What a sampler returned: tokens ``[B]``, log-probs ``[B, 2]`` or None, kept ids ``[B, K]`` or None, notes."""

    tokens: torch.Tensor
    log_probs: torch.Tensor | None
    kept: torch.Tensor | None
    notes: tuple[str, ...]


MASKS = frozenset({"top_k", "top_p"})


def noise_of(impl: Impl) -> Noise:
    """The noise the implementation declares (``fn.noise``), or the contract's."""
    return getattr(impl.fn, "noise", gumbel_noise)


def noise_key_of(impl: Impl) -> str:
    """What keys the sampler's noise (``fn.noise_key``): ``"id"`` (the default: row seed and token id, the
    contract's noise or ``fn.noise``), ``"step"`` (``fn.noise`` is a function of the whole batch's seeds, row and
    token id: one key per step, as an engine draws it), or a key no token noise can declare, such as ``"candidate
    position"``: then token-exactness cannot hold by design, a named divergence (:mod:`properties.sampling.support`).
    """
    return str(getattr(impl.fn, "noise_key", "id"))


def token_noise(impl: Impl) -> bool:
    """Whether the oracle can draw the sampler's noise token by token (keyed by id, per row or per step)."""
    return noise_key_of(impl) in ("id", "step")


def masks_of(impl: Impl) -> frozenset[str]:
    """The masks the implementation takes (``fn.masks``): True (default) both, False neither, or a tuple of
    ``"top_k"`` and ``"top_p"`` (a candidate sampler with a top-k and no top-p)."""
    masks = getattr(impl.fn, "masks", True)
    if isinstance(masks, bool):
        return MASKS if masks else frozenset()
    return frozenset(masks) & MASKS


def draws_from_candidates(impl: Impl) -> bool:
    """Whether the sampler draws from each rank's top C candidates (``fn.draws_from_candidates``): only then can a
    candidate-path fault (a missing fallback) explain its failures."""
    return bool(getattr(impl.fn, "draws_from_candidates", False))


def plan_for(impl: Impl, plan: SamplePlan) -> SamplePlan:
    """``plan`` as the implementation can take it: the masks it does not declare (``fn.masks``) off."""
    takes = masks_of(impl)
    top_k = plan.top_k if "top_k" in takes else "off"
    top_p = plan.top_p if "top_p" in takes else "off"
    return SamplePlan(plan.temperature, top_k, top_p, plan.candidates, plan.seed)


def unpack(out: object) -> Drawn | None:
    parts = out if isinstance(out, tuple) else (out,)
    if not 1 <= len(parts) <= 4:
        return None
    tokens, log_probs, kept, notes = (*parts, None, None, None)[:4]
    return Drawn(tokens, log_probs, kept, tuple(notes or ()))


def run_sampler(impl: Impl, inputs: Inputs, plan: SamplePlan, prop: str) -> tuple[Drawn, SamplingParams]:
    """Run a sampler on every rank; enforce the output contract and agreement across ranks."""
    params = params_of(inputs, plan)
    coverage.observe_sampling(params, inputs.vocab, lambda: scaled(answer(inputs).target_logits[0], params.to("cpu")))
    return run_with(impl, inputs, params, prop), params


def run_with(impl: Impl, inputs: Inputs, params: SamplingParams, prop: str) -> Drawn:
    """:func:`run_sampler` with the parameters given."""

    def tweak(kw: dict) -> dict:
        return {**kw, "sampling": params.to(rank_device(inputs.device, kw["layout"].rank), copy=True)}

    results = run_valid(impl, inputs, prop, tweak)
    batch = inputs.case.batch
    drawn = [unpack(out) for out in results]
    for rank, d in enumerate(drawn):
        problem = _contract(d, batch)
        if problem:
            fail(f"sampling output contract: rank {rank} returned {problem}", [], impl, inputs, prop)
        first = drawn[0]
        same = torch.equal(d.tokens, first.tokens) and _same_or_none(d.log_probs, first.log_probs)
        if not same:
            fail("ranks disagree on the sample", [f"rank 0 and rank {rank} differ"], impl, inputs, prop)
    if currently_in_test_context():
        for note in set(drawn[0].notes) - {""}:
            event(note)
    return drawn[0]


def _described(t: object) -> str:
    return f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__


def _contract(d: Drawn | None, batch: int) -> str:
    """What is wrong with one rank's output, or ''."""
    if d is None:
        return "a tuple of other than 1 to 4 parts, expected (tokens, log_probs, kept, notes)"
    t, lp, kept = d.tokens, d.log_probs, d.kept
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or tuple(t.shape) != (batch,):
        return f"tokens {_described(t)}, expected int64 ({batch},)"
    if lp is not None and (not isinstance(lp, torch.Tensor) or lp.dtype != torch.float32 or lp.shape != (batch, 2)):
        return f"log_probs {_described(lp)}, expected float32 ({batch}, 2) or None"
    if kept is not None and (not isinstance(kept, torch.Tensor) or kept.dtype != torch.int64 or kept.ndim != 2):
        return f"kept {_described(kept)}, expected int64 ({batch}, K) ids or None"
    return ""


def _same_or_none(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Both None, or equal bit for bit (a NaN matching a NaN), as the top-k's values must be across ranks."""
    if a is None or b is None:
        return a is None and b is None
    return bitwise_equal(a, b)


def oracle_sample(inputs: Inputs, params: SamplingParams, noise: Noise) -> Sample:
    logits = answer(inputs).draft_logits
    return classic_sample(logits, params.to(logits.device), inputs.d2t, inputs.target_vocab, noise)


def kept_masks(kept_ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """bool ``[B, vocab]`` from kept ids ``[B, K]`` (``-1``: none; ids outside the vocabulary left out)."""
    ids = kept_ids.cpu()
    inside = (ids >= 0) & (ids < vocab)
    masks = torch.zeros(ids.shape[0], vocab + 1, dtype=torch.bool)
    return masks.scatter_(1, torch.where(inside, ids, vocab), True)[:, :vocab]


def observed(inputs: Inputs, params: SamplingParams, drawn: Drawn) -> Observed:
    """A run as the fault models judge it (CPU)."""
    loose = boundary(inputs, params.to("cpu"))
    kept = None if drawn.kept is None else kept_masks(drawn.kept, loose.shape[1])
    log_probs = None if drawn.log_probs is None else drawn.log_probs.cpu()
    return Observed(params.to("cpu"), drawn.tokens.cpu(), kept, log_probs, loose, answer(inputs).target_logits[0])


def subject_of(impl: Impl, inputs: Inputs, prop: str) -> Subject:
    """What the fault models know of ``impl``, and how they rerun it on ``inputs`` with other parameters."""

    def rerun(params: SamplingParams) -> Observed | None:
        try:
            return observed(inputs, params, run_with(impl, inputs, params, prop))
        except (PropertyFailure, ImplementationHung):  # a run that fails confirms nothing
            return None

    def draw(other: Inputs, params: SamplingParams) -> torch.Tensor | None:
        try:
            return run_with(impl, other, params, prop).tokens.cpu()
        except (PropertyFailure, ImplementationHung):
            return None

    own = not token_noise(impl)
    return Subject(noise_of(impl), masks_of(impl), draws_from_candidates(impl), rerun, own, draw)


def same_token(prediction: Prediction, seen: Observed, row: int) -> bool:
    """The model's token on ``row``, or a token rounding may keep or drop (within top-p's slack)."""
    token = int(seen.tokens[row])
    return token == int(prediction.tokens[row]) or (0 <= token < seen.loose.shape[1] and bool(seen.loose[row, token]))


def same_kept(prediction: Prediction, seen: Observed, row: int) -> bool:
    """The model's token and kept set on ``row``, but for tokens within top-p's slack: a kept set alone cannot tell
    a sampler that reports top-k's set from one that draws from it."""
    return same_token(prediction, seen, row) and _same_kept_set(prediction, seen, row)


def in_support(prediction: Prediction, seen: Observed, row: int) -> bool:
    """For a sampler with its own randomness, whose tokens no model can predict: the row's token is one the model
    draws for some noise (or lies within top-p's slack), and the kept set it reports is the model's (slack aside)."""
    token = int(seen.tokens[row])
    inside = holds(prediction.support[row], token) or holds(seen.loose[row], token)
    return inside and _same_kept_set(prediction, seen, row)


def _same_kept_set(prediction: Prediction, seen: Observed, row: int) -> bool:
    """The kept set the run reports on ``row`` is the model's, tokens within top-p's slack aside (none reported:
    nothing to compare)."""
    return seen.kept is None or not bool(((prediction.kept[row] != seen.kept[row]) & ~seen.loose[row]).any())


def agreement(impl: Impl, same: Agrees, own: Agrees = in_support) -> Agrees:
    """How a model must reproduce ``impl``'s rows: by ``same`` where the oracle draws its noise, else by ``own``."""
    return same if token_noise(impl) else own


def divergent(inputs: Inputs, params: SamplingParams, want: Sample, row: int, token: int) -> bool:
    """The named divergence of an all ``-inf`` row with d2t: the classic path takes target 0, a local path the
    smallest target a draft id maps to.  A sampled row is all ``-inf`` where every kept ``x`` is, a temperature
    that overflows ``logit / T`` included."""
    if inputs.d2t is None or int(want.tokens[row]) != 0 or token != int(draft_targets(inputs).min()):
        return False
    if bool(params.greedy[row]):
        return bool((answer(inputs).draft_logits[row] == -math.inf).all())
    x = scaled(answer(inputs).target_logits[0][row : row + 1], params.rows([row]).to("cpu"))[0]
    return bool((x[want.kept[row].cpu()] == -math.inf).all())


def boundary(inputs: Inputs, params: SamplingParams) -> torch.Tensor:
    """bool ``[B, V_target]``: tokens whose mass above them lies within :func:`top_p_slack` of ``p`` times the kept
    mass, whose place rounding may decide.  None on a row whose kept masses are all exactly 0 or 1 (equal masses,
    ``x`` flattened by a huge temperature): every sum of them is an integer, exact in any order, so a token with
    exactly ``p`` of the mass above it is out (``<``), never in by rounding."""
    full, _ = answer(inputs).target_logits
    x = scaled(full, params)
    kept = top_k_mask(x, params.top_k)
    margin, total = top_p_margin(x, kept, params.top_p)
    slack = torch.tensor([top_p_slack(int(n)) for n in kept.sum(dim=1)], dtype=torch.float64).unsqueeze(1)
    near = margin.abs() <= slack * total
    e = masses(x, kept)
    exact = ((e == 0) | (e == 1)).all(dim=1)
    on = (params.top_p < 1) & has_probabilities(x, kept) & ~params.greedy & ~exact
    return near & kept & on.unsqueeze(1)


def check_sample_invariance(impl: Impl, inputs: Inputs, plan: SamplePlan, tps: list[int] | None = None) -> None:
    """The same tokens twice in a row, and at each tp of ``tps`` (default: every other tp the backend runs)."""
    others = [tp for tp in (backend_tps(inputs.backend) if tps is None else tps) if tp != inputs.tp]
    with repro_extra(sampling=plan_fields(plan), tps=others):
        first, params = run_sampler(impl, inputs, plan, SAMPLE_INVARIANCE)
        # noise keyed by candidate position moves with the shards: across tp only greedy rows must agree
        judged = torch.ones_like(params.greedy) if token_noise(impl) else params.greedy
        judged = judged.cpu()
        second, _ = run_sampler(impl, inputs, plan, SAMPLE_INVARIANCE)
        if not torch.equal(first.tokens, second.tokens):
            row = int((first.tokens != second.tokens).nonzero()[0])
            lines = [f"row {row}: {int(first.tokens[row])} then {int(second.tokens[row])}"]
            fail("sampling nondeterminism: two runs on identical input differ", lines, impl, inputs, SAMPLE_INVARIANCE)
        for tp in others:
            side = inputs.with_tp(tp)
            other, params = run_sampler(impl, side, plan, SAMPLE_INVARIANCE)
            differ = (other.tokens.cpu() != first.tokens.cpu()) & judged
            if bool(differ.any()):
                row = int(differ.nonzero()[0])
                low, high = sorted((inputs.tp, tp))
                fail(
                    f"sampling TP invariance: tokens differ between tp={low} and tp={high}"
                    + _side_fault(impl, params, [(inputs, first), (side, other)], row),
                    [f"row {row}: {int(first.tokens[row])} at tp={inputs.tp}, {int(other.tokens[row])} at tp={tp}"],
                    impl,
                    inputs,
                    SAMPLE_INVARIANCE,
                )


def _side_fault(impl: Impl, params: SamplingParams, sides: list[tuple[Inputs, Drawn]], row: int) -> str:
    """``"; RULE"`` for the fault that explains the side whose token on ``row`` is not the classic sampler's."""
    noise = noise_of(impl)
    for inputs, drawn in sides:
        want = oracle_sample(inputs, params, noise).tokens.cpu()
        if int(drawn.tokens[row]) != int(want[row]):
            tokens = drawn.tokens.cpu()
            rule = non_token_rule(inputs, int(tokens[row])) or name_fault(
                inputs,
                params,
                subject_of(impl, inputs, SAMPLE_INVARIANCE),
                observed(inputs, params, drawn),
                list(range(len(tokens))),
                same_token,
            )
            return f"; {rule}" if rule else ""
    return ""
