"""Faults that change which logit wins, each as a model: the row's logits as the faulty code computes them.

A rule that blames one of these is named only when its model chooses exactly the id the implementation returned
(:func:`explaining`): evidence, not a guess from the look of the values.  The models read the case's tensors and
the oracle's logits, never the implementation's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from properties.cases.case import Case, Inputs
from properties.oracle import Answer

SIGNED_ZERO = "signed zero: -0.0 and +0.0 tie, and the first of them must win"
SOFT_CAP_SKIPPED = "soft cap not applied before choosing: the chosen id wins only without the cap"
SUBNORMALS = "subnormal logits flushed to zero before the reduction"
TF32 = "float32 logits from a TF32 matmul: rule 1 computes them in full float32 (TF32 off)"
NOT_ROUNDED = "logits not rounded to the head's dtype before the reduction"
ADDED_UNCAPPED = "cap or scale not applied to the added rows"
BIAS_SKIPPED = "bias not added before choosing: the chosen id wins only without it"
ADDED_MASKED = "added ids left out of the reduction, as padding: the chosen id wins only without them"
CPU_ENGINE = "captured in vLLM's workers"  # how an end-to-end case says where it came from (Inputs.applied)
VALUES_NARROWED = "values carried in a float type narrower than the logits' before the reduction"


@dataclass(frozen=True)
class Fault:
    """A fault and its model: ``logits(want, row)`` gives the row's logits as the fault computes them, from the
    oracle's answer ``want``
    (None where the fault cannot change this case); ``rule`` names the fault, ``how`` completes "the chosen id is
    the first maximum of the logits ...", ``detail`` says which variant of the fault (after the rule), and
    ``ties_only`` keeps it to choices among logits equal in the head's dtype, ``finite_ties`` keeps it from ties
    of infinite logits (a value stage, such as the bias, can make one side finite, as can any tie order)."""

    rule: str
    how: str
    logits: Callable[[Answer, int], torch.Tensor | None]
    ties_only: bool = False
    detail: str = ""
    finite_ties: bool = False  # on a tie, only between finite logits: an infinite tie's order is the tie rules' to name

    @property
    def named(self) -> str:
        """The rule as a failure names it."""
        return f"{self.rule}: {self.detail}" if self.detail else self.rule


def tf32_linear(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` as a TF32 matmul computes it: on CUDA, cuBLAS with TF32 allowed; elsewhere a model of it, each
    float32 input rounded to TF32's 10 mantissa bits (to nearest, ties away, as tensor cores convert) and the
    products summed in float32."""
    if hidden.device.type == "cuda":
        allowed = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return F.linear(hidden, weight, bias)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allowed

    def rounded(t: torch.Tensor) -> torch.Tensor:
        bits = t.view(torch.int32)
        return torch.where(torch.isfinite(t), ((bits + 0x1000) & ~0x1FFF).view(torch.float32), t)

    return F.linear(rounded(hidden), rounded(weight), bias)


def recompute(inputs: Inputs, row: int, dtype: torch.dtype) -> torch.Tensor:
    """The row's token logits computed directly from the head in ``dtype`` (then cap, then scale), never rounded
    to the head's dtype."""
    case, vocab = inputs.case, inputs.vocab
    bias = None if inputs.bias is None else inputs.bias[:vocab].to(dtype)
    return _capped(F.linear(inputs.hidden[row : row + 1].to(dtype), inputs.weight[:vocab].to(dtype), bias)[0], case)


def _capped(logits: torch.Tensor, case: Case) -> torch.Tensor:
    """Logits after the matmul, then the case's soft cap, then its scale (the classic path's order)."""
    if case.soft_cap is not None:
        logits = torch.tanh(logits / case.soft_cap) * case.soft_cap
    return logits * case.scale if case.scale != 1.0 else logits


def _zero_order(want: Answer, row: int) -> torch.Tensor | None:
    """-0.0 just below +0.0 (float64 holds a number between them and every smaller logit of the head)."""
    logits = want.draft_logits[row]
    negative_zero = (logits == 0) & torch.signbit(logits)
    if not bool(negative_zero.any()):
        return None
    return logits.double().masked_fill(negative_zero, -torch.finfo(torch.float64).tiny)


def _flushed(want: Answer, row: int) -> torch.Tensor | None:
    logits = want.draft_logits[row]
    subnormal = logits.float().abs() < torch.finfo(logits.dtype).smallest_normal
    if not bool((subnormal & (logits != 0)).any()):
        return None
    return torch.where(subnormal, torch.zeros_like(logits), logits)


def _tf32(want: Answer, row: int) -> torch.Tensor | None:
    """What each rank multiplies, the whole batch by its shard: cuBLAS picks its kernel by shape (one row alone may
    never reach the tensor cores, and so never round to TF32), the CPU its summation order."""
    inputs = want.inputs
    if want.draft_logits.dtype != torch.float32 or (
        CPU_ENGINE in inputs.applied and inputs.hidden.device.type == "cpu"
    ):
        return None  # vLLM's CPU engine multiplies float32 heads in float32 (oneDNN): never in TF32
    logits = inputs.hidden.new_empty(inputs.vocab)
    for lay in inputs.layouts:
        weight, bias = inputs.weight_shard(lay.rank), inputs.bias_shard(lay.rank)
        shard = tf32_linear(inputs.hidden.to(weight.device), weight, bias)[row]
        logits[lay.token_ids(logits.device)] = shard[lay.token_rows(shard.device)].to(logits.device)
    return _capped(logits, inputs.case)


def _in(dtype: torch.dtype) -> Callable[[Answer, int], torch.Tensor | None]:
    def model(want: Answer, row: int) -> torch.Tensor | None:
        return recompute(want.inputs, row, dtype) if want.draft_logits.dtype.itemsize < dtype.itemsize else None

    return model


def _uncapped(want: Answer, row: int) -> torch.Tensor | None:
    """The logits with the scale and without the soft cap, in the head's dtype."""
    case = want.inputs.case
    if case.soft_cap is None:
        return None
    raw = want.raw_logits[row]
    return raw * case.scale if case.scale != 1.0 else raw


def _added_left(cap: bool, scale: bool) -> Callable[[Answer, int], torch.Tensor | None]:
    """The base ids' logits as the classic path computes them, the added ids' without the soft cap (``cap``) and
    without the scale (``scale``)."""

    def model(want: Answer, row: int) -> torch.Tensor | None:
        case, org, logits = want.inputs.case, want.inputs.case.vocab, want.draft_logits[row]
        if org >= want.inputs.vocab or (cap and case.soft_cap is None) or (scale and case.scale == 1.0):
            return None
        added = want.raw_logits[row, org:]  # before cap and scale, in the head's dtype
        if case.soft_cap is not None and not cap:
            added = torch.tanh(added / case.soft_cap) * case.soft_cap
        if case.scale != 1.0 and not scale:
            added = added * case.scale
        return torch.cat([logits[:org], added])

    return model


def _without_bias(block: str) -> Callable[[Answer, int], torch.Tensor | None]:
    """The row's logits as the classic path computes them (matmul, cap, scale, in the head's dtype) with the bias
    left off ``block``: the added ids, the base ids, or every id."""

    def model(want: Answer, row: int) -> torch.Tensor | None:
        inputs = want.inputs
        org, vocab = inputs.case.vocab, inputs.vocab
        if inputs.bias is None or (block != "every" and org >= vocab):
            return None
        bare = F.linear(inputs.hidden[row : row + 1], inputs.weight[:vocab])[0]
        bare = _capped(bare, inputs.case).to(want.draft_logits.dtype).to(want.draft_logits.device)
        left = {"added": slice(org, vocab), "base": slice(0, org), "every": slice(0, vocab)}[block]
        logits = want.draft_logits[row].clone()
        logits[left] = bare[left]
        return logits

    return model


def _added_masked(want: Answer, row: int) -> torch.Tensor | None:
    """The base ids' logits alone: every added id ``-inf``, as padding is."""
    org, logits = want.inputs.case.vocab, want.draft_logits[row]
    return None if org >= want.inputs.vocab else torch.cat([logits[:org], torch.full_like(logits[org:], -torch.inf)])


def _narrowed(dtype: torch.dtype) -> Callable[[Answer, int], torch.Tensor | None]:
    """The ranks' maxima alone, each rounded to ``dtype``, as an exchange that carries the values in it compares them
    (a float32 head's only: a 16-bit head's logits are already as narrow)."""

    def model(want: Answer, row: int) -> torch.Tensor | None:
        logits, inputs = want.draft_logits[row], want.inputs
        if logits.dtype.itemsize <= dtype.itemsize:
            return None
        carried, n = torch.full_like(logits, -torch.inf), len(logits)
        for lay in inputs.layouts:
            device = logits.device
            base = torch.arange(lay.start, max(lay.start, min(lay.start + lay.base_real, n)), device=device)
            end = max(lay.added_start, min(lay.added_start + lay.added_real, n))
            mine = torch.cat([base, torch.arange(lay.added_start, end, device=device)])
            if len(mine):
                best = mine[int(torch.argmax(logits[mine]))]  # the rank's first maximum (a NaN first)
                carried[best] = logits[best].to(dtype).to(logits.dtype)
        return carried

    return model


def named(faults: list[Fault]) -> str:
    """The rule the first of ``faults`` names; for values carried in a narrow type, with every type that explains the
    choice (bfloat16 and float16 round a near tie alike)."""
    first = faults[0]
    if first.rule != VALUES_NARROWED:
        return first.named
    types = [f.detail.removeprefix("rounded to ") for f in faults if f.rule == first.rule]
    return f"{first.rule}: rounded to {' or '.join(types)}"


def _left_off(cap: bool, scale: bool) -> str:
    return " and ".join(what for what, off in (("the soft cap", cap), ("the scale", scale)) if off)


FAULTS = (
    Fault(SIGNED_ZERO, "with -0.0 ordered below +0.0", _zero_order, ties_only=True),
    *(
        Fault(
            ADDED_UNCAPPED,
            f"with {_left_off(cap, scale)} left off the added ids",
            _added_left(cap, scale),
            detail=f"{_left_off(cap, scale)} left off",
        )
        for cap, scale in ((True, True), (True, False), (False, True))
    ),
    *(
        Fault(
            BIAS_SKIPPED, f"without the bias on {ids}", _without_bias(block), detail=f"left off {ids}", finite_ties=True
        )
        for block, ids in (("added", "the added ids"), ("base", "the base ids"), ("every", "every id"))
    ),
    Fault(ADDED_MASKED, "over the base ids alone", _added_masked, finite_ties=True),
    Fault(SUBNORMALS, "with subnormals flushed to zero", _flushed),
    Fault(TF32, "from a TF32 matmul", _tf32),
    # Where both explain a choice, a 16-bit head's float32 logits come before a missing cap (a fused float32
    # epilogue is the common cause there), and a missing cap before a float32 head's float64 logits (no engine's
    # epilogue runs in float64).
    Fault(NOT_ROUNDED, "computed in float32", _in(torch.float32), detail="computed in float32"),
    Fault(SOFT_CAP_SKIPPED, "without the soft cap", _uncapped, ties_only=True),
    Fault(NOT_ROUNDED, "computed in float64", _in(torch.float64), detail="computed in float64"),
    # last: a float32 engine whose exchange carries the ranks' maxima in 16 bits ties what float32 tells apart (a
    # TF32 matmul, earlier, ties maxima within 10 bits of each other too: float16's width)
    *(
        Fault(VALUES_NARROWED, f"rounded to {n}", _narrowed(d), detail=f"rounded to {n}")
        for n, d in (("bfloat16", torch.bfloat16), ("float16", torch.float16))
    ),
)


def explaining(want: Answer, row: int, chosen: int, tie: bool) -> Iterator[Fault]:
    """The faults whose model chooses draft id ``chosen`` on ``row`` of the oracle's answer ``want``, most specific
    first; ``tie``: the chosen logit equals the expected one in the head's dtype."""
    for fault in FAULTS:
        if fault.ties_only and not tie:
            continue
        if fault.finite_ties and tie and not bool(torch.isfinite(want.draft_logits[row, chosen])):
            continue
        model = fault.logits(want, row)
        if model is not None and int(torch.argmax(model)) == chosen:
            yield fault
