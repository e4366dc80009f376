"""Turn a wrong token into the rule it broke, the minimal case and a replay command."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from properties.cases import Inputs
from properties.runner import oracle_draft_logits, oracle_tokens, run_ranks
from sharded.layout import ShardLayout

TF32_SLIP = "from a TF32 matmul"
_GROUPS = {"sim": "a simulated group", "gloo": "a gloo process group", "torchrun": "the torchrun job's group"}


class PropertyFailure(AssertionError):
    """A property broke: the message starts with the rule, then the case and how to replay it."""


class ImplementationHung(BaseException):
    """A rank hung or a collective timed out.

    A BaseException, so that Hypothesis stops at once instead of shrinking
    through one timeout per example; pytest still reports it as a failure.
    """


def replay_backend(inputs: Inputs) -> str:
    """Where a find replays: a torchrun find on a local pool (on the simulated group with CUDA tensors, as gloo
    carries CPU ones)."""
    if inputs.backend != "torchrun":
        return inputs.backend
    return "gloo" if inputs.device == "cpu" else "sim"


def replay_command(impl: object, inputs: Inputs, k: int | None = None) -> str:
    backend = replay_backend(inputs)
    width = "" if k is None else f" --k {k}"
    device = "" if inputs.device == "cpu" else f" --device {inputs.device}"
    return f'python -m properties.replay --impl {impl}{width} --backend {backend}{device} "{inputs.case!r}"'


def fail(
    rule: str,
    details: list[str],
    impl: object,
    inputs: Inputs,
    prop: str,
    kind: type = PropertyFailure,
    k: int | None = None,
) -> None:
    """The single place every property failure is raised from (one bug class for Hypothesis)."""
    __tracebackhide__ = True
    exc = kind(
        "\n".join(
            [
                f"[{rule}]",
                f"  property: {prop}",
                f"  implementation: {impl} on {_GROUPS[inputs.backend]} of tp={inputs.tp}",
                *(f"  {d}" for d in details),
                f"  applied plans: {', '.join(inputs.applied) or 'none'}",
                f"  case: {inputs.case!r}",
                f"  replay: {replay_command(impl, inputs, k)}",
            ]
        )
    )
    # what a repro file needs (written by conftest when the test finally fails; see properties/repro.py)
    exc.repro = {"rule": rule, "property": prop, "impl": str(impl), "inputs": inputs, "extra": {}}
    raise exc


@contextmanager
def repro_extra(**extra: object) -> Iterator[None]:
    """Add what a property needs beyond the inputs (rows, a bad-input kind) to failures raised inside."""
    try:
        yield
    except (PropertyFailure, ImplementationHung) as exc:
        exc.repro["extra"].update(extra)
        raise


def draft_targets(inputs: Inputs) -> torch.Tensor:
    """``k + d2t[k]`` for every draft id (identity without a table)."""
    ids = torch.arange(inputs.vocab, device=inputs.hidden.device)
    return ids if inputs.d2t is None else ids + inputs.d2t


def is_named_divergence(inputs: Inputs, logits_row: torch.Tensor) -> bool:
    """An all ``-inf`` row with ``d2t[0] != 0``: the oracle says 0, the local path ``d2t[0]``."""
    return inputs.d2t is not None and int(inputs.d2t[0]) != 0 and bool((logits_row == float("-inf")).all())


def owner(inputs: Inputs, token: int) -> ShardLayout:
    """The layout of the rank holding global id ``token``."""
    return next(lay for lay in inputs.layouts if lay.row_of(token) is not None)


def value_bits(value: torch.Tensor) -> str:
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[value.element_size()]
    raw = int(value.reshape(1).view(width)[0]) & ((1 << (8 * value.element_size())) - 1)
    return f"{float(value)!r} (bits 0x{raw:0{2 * value.element_size()}x})"


def _where(inputs: Inputs, draft_id: int, logits_row: torch.Tensor) -> str:
    return f"draft id {draft_id} on rank {owner(inputs, draft_id).rank}, logit {value_bits(logits_row[draft_id])}"


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


def recompute(inputs: Inputs, row: int, dtype: torch.dtype, linear=F.linear) -> torch.Tensor:
    """The row's token logits computed directly from the head in ``dtype`` with ``linear`` (then cap, then scale)."""
    case, vocab = inputs.case, inputs.vocab
    bias = None if inputs.bias is None else inputs.bias[:vocab].to(dtype)
    logits = linear(inputs.hidden[row : row + 1].to(dtype), inputs.weight[:vocab].to(dtype), bias)[0]
    if case.soft_cap is not None:
        logits = torch.tanh(logits / case.soft_cap) * case.soft_cap
    return logits * case.scale if case.scale != 1.0 else logits


def precision_explanations(inputs: Inputs, row: int, logits: torch.Tensor) -> dict[str, int]:
    """The first maximum of the row under precision slips an implementation might make, by slip."""
    tiny = torch.finfo(logits.dtype).smallest_normal
    flushed = torch.where(logits.float().abs() < tiny, torch.zeros_like(logits), logits)
    slips = {"with subnormals flushed to zero": flushed, "computed in float64": recompute(inputs, row, torch.float64)}
    if logits.dtype != torch.float32:
        slips["computed in float32"] = recompute(inputs, row, torch.float32)
    else:
        slips[TF32_SLIP] = recompute(inputs, row, torch.float32, tf32_linear)
    return {slip: int(torch.argmax(values)) for slip, values in slips.items()}


def is_token(inputs: Inputs, ids: torch.Tensor) -> torch.Tensor:
    """Which of ``ids`` are tokens: below the logits vocabulary, or with d2t, some draft id's target."""
    if inputs.d2t is None:
        return (ids >= 0) & (ids < inputs.vocab)
    return torch.isin(ids, draft_targets(inputs))


def non_token_rule(inputs: Inputs, got: int) -> str | None:
    """The rule a returned id breaks by what it is in the head (never a token), or None if it is a token.

    Padding rows have no global id; an id names one by its position in its block (``start + row``).
    """
    if bool(is_token(inputs, torch.tensor(got, device=inputs.hidden.device))):
        return None
    lay0, vocab = inputs.layouts[0], inputs.vocab
    if inputs.d2t is not None:
        if 0 <= got < inputs.target_vocab:
            return f"returned target {got}, which no draft id maps to through d2t"
        return f"returned id out of range [0, {inputs.target_vocab})"
    rows = lay0.org_vocab + lay0.added_vocab
    if vocab <= got < rows:
        return f"id beyond the logits vocabulary returned: {got} is a head id, but only ids below {vocab} are tokens"
    added_rows = lay0.size - lay0.added_row
    base = (
        f"a base padding row of rank {got // lay0.added_row}"
        if lay0.org_vocab <= got < lay0.added_row * lay0.tp
        else ""
    )
    added = ""
    if rows <= got < lay0.org_vocab + added_rows * lay0.tp:
        added = f"an added padding row of rank {(got - lay0.org_vocab) // added_rows}"
    if base and added:  # the id alone cannot tell which block's position it counts
        return f"padding returned: {got} is {base} or {added}, by position"
    if base or added:
        return f"{'base' if base else 'added'} padding returned: {got} is {base or added}"
    return f"returned id out of range: {got} is no row of the head"


def _misplaced_added(inputs: Inputs, logits: torch.Tensor, first: int, got: int) -> int | None:
    """A maximal added id that a rank numbering its rows contiguously (from ``start``, or from ``rank * size``)
    would report as ``got``; the values prove it holds the row's maximum."""
    org = inputs.layouts[0].org_vocab
    added = logits[org:]
    best = torch.isnan(added) if bool(torch.isnan(logits[first])) else added == logits[first]
    for token in (best.nonzero().flatten()[:64] + org).tolist():
        lay = owner(inputs, token)
        if got in (lay.start + lay.row_of(token), lay.rank * lay.size + lay.row_of(token)):
            return token
    return None


def explain(inputs: Inputs, row: int, got: int) -> tuple[str, list[str]]:
    """The rule a wrong token ``got`` on ``row`` broke, named only when the logits prove it."""
    case = inputs.case
    logits = oracle_draft_logits(inputs)[row]
    first = int(torch.argmax(logits))
    targets = draft_targets(inputs)
    lines = [f"row {row}: expected token {int(targets[first])} ({_where(inputs, first, logits)})"]
    hits = (targets == got).nonzero().flatten()
    tied = bool(hits.numel()) and argmax_equal(logits[int(hits[0])], logits[first])
    if inputs.d2t is not None and got == first != int(targets[first]) and not tied:
        lines.append(f"row {row}: got token {got}")
        return f"d2t mapping skipped: returned draft id {first} instead of target {int(targets[first])}", lines
    added = None if inputs.d2t is not None or tied else _misplaced_added(inputs, logits, first, got)
    if added is not None:
        lines.append(f"row {row}: got token {got}; added id {added} holds the maximum too")
        lay = owner(inputs, added)
        return (
            f"added id mapped to the wrong global id: added id {added} sits at row {lay.row_of(added)} of rank "
            f"{lay.rank}, and {got} is that row's position, not its id"
        ), lines
    rule = non_token_rule(inputs, got)
    if rule is not None:
        lines.append(f"row {row}: got token {got}")
        return rule, lines
    chosen = int(hits[0])
    lines.append(f"row {row}: got token {got} ({_where(inputs, chosen, logits)})")
    want, have = float(logits[first]), float(logits[chosen])
    if math.isnan(want) and not math.isnan(have):
        return "NaN not treated as the maximum: the first NaN must win", lines
    slips = [slip for slip, best in precision_explanations(inputs, row, logits).items() if best == chosen]
    if slips:
        lines.append(f"the chosen id is the first maximum of the logits {' and '.join(slips)}")
        if slips == [TF32_SLIP]:
            return "float32 logits from a TF32 matmul: rule 1 computes them in full float32 (TF32 off)", lines
        return "chose a non-maximal logit", lines
    if argmax_equal(logits[first], logits[chosen]):
        if want == 0.0 and math.copysign(1, want) < 0 < math.copysign(1, have):
            return "signed zero: -0.0 and +0.0 tie, and the first of them must win", lines
        raw = oracle_draft_logits(inputs, raw=True)[row].float()
        if case.soft_cap is not None and float(raw[chosen]) > float(raw[first]):
            return "soft cap applied after choosing: the chosen id wins only before the cap", lines
        at, mine = owner(inputs, first).rank, owner(inputs, chosen).rank
        if at == mine:
            return "tie within a shard resolved to a later index", lines
        if mine > at:
            return "tie across ranks resolved to the higher rank", lines
        return "tie across ranks resolved by rank, not by id: a lower rank's larger (added) id won", lines
    as_float = torch.tensor(float(first), device="cpu")
    rounded = [str(d)[6:] for d in (torch.bfloat16, torch.float16) if as_float.to(d) == chosen]
    if rounded and abs(chosen - first) == 1:  # the id alone cannot tell these two apart
        return f"global id off by one, or id carried in {rounded[0]}: {first} reported as {chosen} fits both", lines
    if rounded:
        return f"id carried in {rounded[0]}: {first} rounds to {chosen}", lines
    if abs(chosen - first) == 1:
        return f"global id off by one (draft id {first} reported as {chosen})", lines
    return "chose a non-maximal logit", lines


def argmax_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal as argmax sees them: NaN equals NaN, -0.0 equals +0.0."""
    return bool(a == b) or bool(torch.isnan(a) & torch.isnan(b))


def _around(logits: torch.Tensor, draft_id: int, width: int = 2) -> str:
    lo, hi = max(0, draft_id - width), min(logits.numel(), draft_id + width + 1)
    return ", ".join(f"{'*' if k == draft_id else ''}{k}: {float(logits[k])!r}" for k in range(lo, hi))


def explain_tokens(impl, inputs: Inputs) -> list[str]:
    """Both tokens on the first row where they differ, the logits around each, and the rank that won."""
    expected = oracle_tokens(inputs)
    try:
        outputs, _ = run_ranks(impl, inputs)
    except Exception as exc:  # noqa: BLE001 - shown, then judged by the property check
        return [f"the implementation raised {type(exc).__name__}: {exc}"]
    got = outputs[0] if isinstance(outputs[0], torch.Tensor) else None
    if got is None or got.shape != expected.shape:
        return [f"the implementation returned {outputs[0]!r}"]
    differ = (got != expected).nonzero().flatten()
    row = int(differ[0]) if differ.numel() else 0
    logits = oracle_draft_logits(inputs)[row]
    targets = draft_targets(inputs)
    lines = [
        f"row {row} of {inputs.case.batch}: oracle token {int(expected[row])}, implementation token {int(got[row])}"
    ]
    for who, token in (("oracle", int(expected[row])), ("implementation", int(got[row]))):
        hits = (targets == token).nonzero().flatten()
        if hits.numel():
            k = int(hits[0])
            lines.append(f"  {who}'s draft id {k} (rank {owner(inputs, k).rank} won): logits {_around(logits, k)}")
        else:
            lines.append(f"  {who}'s token {token}: {non_token_rule(inputs, token)}")
    return lines
