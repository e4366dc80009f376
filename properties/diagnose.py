"""Turn a wrong token into the rule it broke, the minimal case and a replay command."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from properties.cases import Inputs
from properties.runner import oracle_draft_logits, oracle_tokens, run_ranks

_GROUPS = {"sim": "a simulated group", "gloo": "a gloo process group", "torchrun": "the torchrun job's group"}


class PropertyFailure(AssertionError):
    """A property broke: the message starts with the rule, then the case and how to replay it."""


class ImplementationHung(BaseException):
    """A rank hung or a collective timed out.

    A BaseException, so that Hypothesis stops at once instead of shrinking
    through one timeout per example; pytest still reports it as a failure.
    """


def replay_command(impl: object, inputs: Inputs) -> str:
    backend = "gloo" if inputs.backend == "torchrun" else inputs.backend  # replay a torchrun find on a local pool
    return f'python -m properties.replay --impl {impl} --backend {backend} "{inputs.case!r}"'


def fail(rule: str, details: list[str], impl: object, inputs: Inputs, prop: str, kind: type = PropertyFailure) -> None:
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
                f"  replay: {replay_command(impl, inputs)}",
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
    ids = torch.arange(inputs.case.vocab)
    return ids if inputs.d2t is None else ids + inputs.d2t


def is_named_divergence(inputs: Inputs, logits_row: torch.Tensor) -> bool:
    """An all ``-inf`` row with ``d2t[0] != 0``: the oracle says 0, the local path ``d2t[0]``."""
    return inputs.d2t is not None and int(inputs.d2t[0]) != 0 and bool((logits_row == float("-inf")).all())


def _where(inputs: Inputs, draft_id: int, logits_row: torch.Tensor) -> str:
    rank = draft_id // inputs.layouts[0].size
    return f"draft id {draft_id} on rank {rank}, logit {float(logits_row[draft_id])!r}"


def explain(inputs: Inputs, row: int, got: int) -> tuple[str, list[str]]:
    """The rule a wrong token ``got`` on ``row`` broke, with the evidence."""
    case = inputs.case
    logits = oracle_draft_logits(inputs)[row].float()
    first = int(torch.argmax(logits))
    targets = draft_targets(inputs)
    size = inputs.layouts[0].size
    lines = [f"row {row}: expected token {int(targets[first])} ({_where(inputs, first, logits)})"]
    if inputs.d2t is not None and got == first != int(targets[first]):
        lines.append(f"row {row}: got token {got}")
        return f"d2t mapping skipped: returned draft id {first} instead of target {int(targets[first])}", lines
    hits = (targets == got).nonzero().flatten()
    if hits.numel() == 0:
        lines.append(f"row {row}: got token {got}")
        if inputs.d2t is None and case.vocab <= got < inputs.layouts[0].padded_vocab:
            return f"padding id returned: {got} is a padding row of rank {got // size} (vocab {case.vocab})", lines
        if not 0 <= got < inputs.target_vocab:
            return f"returned id out of range [0, {inputs.target_vocab})", lines
        return f"returned target {got}, which no draft id maps to through d2t", lines
    chosen = int(hits[0])
    lines.append(f"row {row}: got token {got} ({_where(inputs, chosen, logits)})")
    want, have = float(logits[first]), float(logits[chosen])
    if (math.isnan(want) and math.isnan(have)) or want == have:
        if want == 0.0 and math.copysign(1, want) != math.copysign(1, have):
            return "signed zero: -0.0 and +0.0 tie, and the first of them must win", lines
        raw = oracle_draft_logits(inputs, raw=True)[row].float()
        if case.soft_cap is not None and float(raw[chosen]) > float(raw[first]):
            return "soft cap applied after choosing: the chosen id wins only before the cap", lines
        if chosen // size == first // size:
            return "tie within a shard resolved to a later index", lines
        return "tie across ranks resolved to the higher rank", lines
    if abs(chosen - first) == 1:
        return f"global id off by one (draft id {first} reported as {chosen})", lines
    if math.isnan(want):
        return "NaN not treated as the maximum: the first NaN must win", lines
    for dtype in (torch.bfloat16, torch.float16):
        if int(torch.tensor(float(first)).to(dtype).float()) == chosen:
            return f"id carried in {str(dtype)[6:]}: {first} rounds to {chosen}", lines
    return "chose a non-maximal logit", lines


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
    logits = oracle_draft_logits(inputs)[row].float()
    targets = draft_targets(inputs)
    size = inputs.layouts[0].size
    lines = [
        f"row {row} of {inputs.case.batch}: oracle token {int(expected[row])}, implementation token {int(got[row])}"
    ]
    for who, token in (("oracle", int(expected[row])), ("implementation", int(got[row]))):
        hits = (targets == token).nonzero().flatten()
        if hits.numel():
            k = int(hits[0])
            lines.append(f"  {who}'s draft id {k} (rank {k // size} won): logits {_around(logits, k)}")
        else:
            lines.append(f"  {who}'s token {token} is no draft id's target (padding or out of range)")
    return lines
