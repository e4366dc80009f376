"""The first stage of the classic pipeline whose output a failing row departs from, where no fault model explains it.

The classic sampler is a pipeline: ``x = logit / T``, top-k (every token at or above the k-th value), top-p over
what top-k kept, the noise, the draw (the first maximum of ``x + noise``), the log-probability at the token.  A
sampler reports some of these outputs (its kept set, its log-probabilities, its token); each is compared with the
classic stage that makes it, and the first stage that cannot have made it is the rule, with its evidence.  These
rules come after the fault models (:mod:`properties.sampling.faults`): a model's name where its experiments hold,
otherwise the stage.
"""

from __future__ import annotations

import math

import torch

from properties.argmax.diagnosis import draft_targets
from properties.cases.case import Inputs
from properties.oracle import answer
from reference.sampling import Noise, SamplingParams, scaled, top_k_mask, top_p_mask
from reference.topk import order_keys

KEPT_NOT_TOP = "kept set is not a top set of x = logit / T: it keeps a token below one it drops"
KEPT_AFTER_TOP_K = "kept set differs after top-k"
KEPT_AFTER_TOP_P = "kept set differs after top-p"
KEPT_AT_ANOTHER_T = "kept set differs at x = logit / T: the masks took the logits, not logit / T"
KEPT_NO_MASK = "kept set differs where no mask applies: every token is kept"
KEPT_OVERFLOW = "kept set differs where logit / T overflowed to +inf: without probabilities top-p keeps top-k's set"
GREEDY_KEPT = "greedy row's kept set is not its token alone"
DRAW_WRONG = "drew another kept token, whose x + noise lies below the classic token's: the noise or the draw differs"
LOG_PROB_AT = "{kind} log-probability taken at {where}, not at the token"
LOG_PROB_IS = "{kind} log-probability is {what}"
LOG_PROB_OVERFLOW = "processed log-probability where logit / T overflowed to +inf: over an +inf, log_softmax is NaN"
RAW = "the raw one: neither the temperature nor the masks applied"
BEFORE_MASKS = "taken before the masks: normalised over every token's x"
BEFORE_T = "taken before the temperature: normalised over the kept logits, not x"
AT_DRAFT_ID = "the draft id (before d2t)"


def _row(inputs: Inputs, params: SamplingParams, row: int) -> tuple[torch.Tensor, torch.Tensor, SamplingParams]:
    """The row's logits by target id ``[1, V]``, the ids some draft id maps to ``[V]``, and its parameters (CPU)."""
    full, mapped = answer(inputs).target_logits
    return full[row : row + 1].cpu(), mapped.cpu(), params.to("cpu").rows([row])


def kept_stage(
    inputs: Inputs,
    params: SamplingParams,
    row: int,
    got: torch.Tensor,
    loose: torch.Tensor,
    without_top_p: torch.Tensor | None = None,
) -> str:
    """The rule and evidence (``"RULE: evidence"``) for ``row``'s reported kept set ``got`` (bool ``[V]``), which
    differs from the classic one but for the tokens in ``loose`` (top-p's rounding slack).  ``without_top_p``: the
    set the sampler reports for the row with top-p off (the experiment that shows top-k's output), where it ran.

    * not a top set of ``x`` (a kept token lies strictly below a dropped one): ``x`` itself differs;
    * ``x`` overflowed to ``+inf`` (top-p has no probabilities, and keeps top-k's set): the overflow;
    * top-k's output differs (with top-p off, or a kept token top-k drops): top-k;
    * the classic set of the logits at temperature 1 (the row's is another): the masks never saw ``x``; else top-p.
    """
    full, mapped, p = _row(inputs, params, row)
    if bool(p.greedy[0]):
        return f"{GREEDY_KEPT}: {int(got.sum())} id(s) kept"
    x = scaled(full, p)
    keys = order_keys(x)[0].double()
    judged = mapped & ~loose
    kept_keys, dropped_keys = keys[got & judged], keys[~got & judged]
    if kept_keys.numel() and dropped_keys.numel() and float(kept_keys.min()) < float(dropped_keys.max()):
        low = int(torch.where(got & judged, keys, math.inf).argmin())
        high = int(torch.where(~got & judged, keys, -math.inf).argmax())
        return f"{KEPT_NOT_TOP}: keeps id {low} (x = {float(x[0, low])!r}), drops id {high} (x = {float(x[0, high])!r})"
    by_k = top_k_mask(x, p.top_k)[0] & mapped
    k, top_p, t = int(p.top_k[0]), float(p.top_p[0]), float(p.temperature[0])
    kept = f"{int(got.sum())} id(s) kept where the k-th value (k = {k}) keeps {int(by_k.sum())}"
    if top_p >= 1:
        return f"{KEPT_AFTER_TOP_K}: {kept}" if 0 < k < x.shape[1] else f"{KEPT_NO_MASK}: {kept}"
    if overflowed(full[0], x[0], by_k):
        return f"{KEPT_OVERFLOW}: at T = {t:g}, {kept}"
    differ = lambda a, b: bool(((a != b) & judged).any())  # noqa: E731
    if without_top_p is not None and differ(without_top_p, by_k):
        shown = f"{int(without_top_p.sum())} id(s) kept where the k-th value (k = {k}) keeps {int(by_k.sum())}"
        return f"{KEPT_AFTER_TOP_K}: with top-p off, {shown}"
    if without_top_p is None and bool((got & ~by_k & judged).any()):
        return f"{KEPT_AFTER_TOP_K}: {kept}, and some of them top-k drops"
    one = full.float()
    if t != 1.0 and not differ(top_p_mask(one, (top_k_mask(one, p.top_k)[0] & mapped)[None], p.top_p)[0], got):
        return f"{KEPT_AT_ANOTHER_T}: it is the classic set at T = 1, not at the row's T = {t:g}"
    classic = int(top_p_mask(x, by_k[None], p.top_p)[0].sum())
    over = f"top-p {top_p!r} over top-k's {int(by_k.sum())} keeps {classic}"
    return f"{KEPT_AFTER_TOP_P}: {int(got.sum())} id(s) kept where {over}"


def overflowed(logits: torch.Tensor, x: torch.Tensor, kept: torch.Tensor) -> bool:
    """Whether some kept ``x`` is ``+inf`` only because ``logit / T`` overflowed float32 (its logit is finite)."""
    return bool(((x == math.inf) & torch.isfinite(logits.float()) & kept).any())


def draw_stage(inputs: Inputs, params: SamplingParams, noise: Noise, row: int, got: int, want: int) -> str | None:
    """:data:`DRAW_WRONG` with the two scores, where ``got`` is a kept token whose ``x + noise`` lies strictly below
    the classic token's; None otherwise (a tie, or a token the draw could not return)."""
    full, _, p = _row(inputs, params, row)
    x = scaled(full, p)[0]
    g = noise(p.seed, torch.arange(x.numel())).cpu()[0]
    score = x + g
    if not (0 <= got < x.numel()) or not bool(score[got] < score[want]):
        return None
    return f"{DRAW_WRONG}: id {got} scores {float(score[got])!r}, id {want} {float(score[want])!r}"


def log_prob_stage(
    inputs: Inputs, params: SamplingParams, kept: torch.Tensor, row: int, token: int, which: int, close
) -> str | None:
    """What a log-probability off by more than the tolerance equals, where it equals something (``close(value)``:
    within the tolerance): the value at another index (the draft id, the shard column, the row's argmax), or, for
    the processed one, the raw value, the value before the masks or before the temperature.  ``kept``: the row's
    classic kept set (bool ``[V]``).  None where it equals none of them: the stage rule then stands."""
    full, _, p = _row(inputs, params, row)
    x = scaled(full, p)
    kind = ("raw", "processed")[which]
    raw = torch.log_softmax(full.double(), dim=1)[0]
    processed = torch.log_softmax(x.double().masked_fill(~kept[None], -math.inf), dim=1)[0]
    at = (raw, processed)[which]
    draft = _draft_id(inputs, token)
    indices = {AT_DRAFT_ID: draft, "the row's argmax": int(order_keys(x)[0].argmax())}
    indices["its row in the owner's shard"] = _column(inputs, draft)
    for where, index in indices.items():
        if index is not None and index != token and 0 <= index < at.numel() and close(float(at[index])):
            return LOG_PROB_AT.format(kind=kind, where=where)
    if which == 0:
        return None
    if overflowed(full[0], x[0], kept):
        return LOG_PROB_OVERFLOW
    whole = torch.log_softmax(x.double(), dim=1)[0]
    unscaled = torch.log_softmax(full.double().masked_fill(~kept[None], -math.inf), dim=1)[0]
    for what, value in (
        (RAW, raw[token]),
        (BEFORE_MASKS, whole[token]),
        (BEFORE_T, unscaled[token]),
    ):
        if close(float(value)):
            return LOG_PROB_IS.format(kind=kind, what=what)
    return None


def _draft_id(inputs: Inputs, token: int) -> int | None:
    """The draft id whose target ``token`` is (itself without d2t), or None where none maps to it."""
    hit = (draft_targets(inputs).cpu() == token).nonzero()
    return int(hit[0]) if hit.numel() else None


def _column(inputs: Inputs, draft: int | None) -> int | None:
    """The row of ``draft`` within its rank's shard (what a sampler indexing its shard's logits would take)."""
    if draft is None:
        return None
    for lay in inputs.layouts:
        hit = (lay.token_ids() == draft).nonzero()
        if hit.numel():
            return int(lay.token_rows()[int(hit[0])])
    return None
