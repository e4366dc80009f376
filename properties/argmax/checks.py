"""The property bodies, independent of Hypothesis so that meta-tests and replay reuse them.

Each ``check_*`` takes an implementation and built inputs and either returns or
raises :class:`~properties.argmax.diagnosis.PropertyFailure` naming the rule it broke.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import event
from hypothesis.control import currently_in_test_context

from groups.simulated import RankTimeout
from groups.tasks import RankLost
from properties.argmax.diagnosis import (
    ANOTHER_ROW,
    NAN_NOT_MAX,
    NON_MAXIMAL,
    TIE_BY_RANK,
    TIE_HIGHER_RANK,
    TIE_IN_SHARD,
    explain,
    is_named_divergence,
    is_token,
    lead_row,
    non_token_rule,
)
from properties.argmax.layouts import disagreement, one_ranks_inputs, reduction_rule, segment_rule
from properties.cases.case import Inputs
from properties.failures import ImplementationHung, fail, repro_extra
from properties.harness.runner import backend_tps, run_ranks
from properties.oracle import answer
from sharded.impls import Impl
from sharded.no_exit import ImplementationExit

TOKEN_EXACT = "token-exact equality with the classic path"
OUTPUT_CONTRACT = "output contract: int64 [B], identical on every rank, a token (never padding or an id >= L)"
TP_INVARIANCE = "TP invariance: the same head split for another tp gives the same tokens"
ROW_INDEPENDENCE = "row independence: a row's token does not depend on the other rows"
DETERMINISM = "determinism: the same input gives the same tokens"
REJECTS = "bad input is rejected with a ValueError naming the problem"


def run_valid(impl: Impl, inputs: Inputs, prop: str, tweak: Callable | None = None) -> list[object]:
    """Every rank's output on valid input; a hang, a rank that ends or an exception is a failure of ``prop``."""
    try:
        return run_ranks(impl, inputs, tweak)[0]
    except (RankTimeout, ImplementationExit) as exc:
        ended(exc, impl, inputs, prop)
    except Exception as exc:  # an implementation must not raise on valid input
        notes = "".join(getattr(exc, "__notes__", [])).strip().splitlines()[-6:]
        fail(f"raised on valid input: {type(exc).__name__}: {exc}", notes, impl, inputs, prop)


def ended(exc: RankTimeout | ImplementationExit, impl: Impl, inputs: Inputs, prop: str, on: str = "") -> None:
    """A run that never returned: the implementation tried to end the process, a rank's process ended, or a rank
    hung.  Each stops Hypothesis at once (:class:`ImplementationHung`): shrinking would cost a pool or a timeout
    per try, and none of them depends on the case.  A hang that waited out a limit names it, its value and the
    option that raises it: a slow implementation looks hung until the limit is above its time."""
    what = "hang"
    if isinstance(exc, ImplementationExit):
        what = "tried to end the run"
    elif isinstance(exc, RankLost):
        what = "rank process ended"
    rule = f"{what}{on}: {exc}"
    limit = None if isinstance(exc, ImplementationExit | RankLost) else exc.limit
    if limit is not None:
        raise_it = RAISES.get(exc.limit_name, "a fixed limit")
        rule += f"; the {exc.limit_name} of {limit:g} s ran out ({raise_it})"
    fail(rule, [], impl, inputs, prop, kind=ImplementationHung)


RAISES = {"collective timeout": "--collective-timeout SECONDS raises it"}  # the start-up timeout has no option


def run_checked(impl: Impl, inputs: Inputs, prop: str, tweak: Callable | None = None) -> torch.Tensor:
    """Run on every rank and enforce the output's type, shape and agreement; return the tokens (under attention
    data parallel, every rank's own rows in rank order: the batch's)."""
    results = run_valid(impl, inputs, prop, tweak)
    counts = inputs.dp_rows
    for rank, out in enumerate(results):
        want = (inputs.case.batch,) if counts is None else (counts[rank],)
        if not isinstance(out, torch.Tensor) or out.dtype != torch.int64 or tuple(out.shape) != want:
            got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            mine = "" if counts is None else f" (its own rows: rows per rank {list(counts)})"
            fail(f"output contract: rank {rank} returned {got}, expected int64 {want}{mine}", [], impl, inputs, prop)
        if counts is None and not torch.equal(out, results[0]):
            rule, lines = disagreement(inputs, results, rank)
            fail(rule, lines, impl, inputs, prop)
    return results[0] if counts is None else torch.cat(results)


def check_token_exact(impl: Impl, inputs: Inputs, prop: str = TOKEN_EXACT) -> None:
    tokens = run_checked(impl, inputs, prop)
    want = answer(inputs)
    logits, expected = want.draft_logits, want.tokens
    wrong = []
    for row in (tokens != expected).nonzero().flatten().tolist():
        if is_named_divergence(inputs, logits[row]) and int(tokens[row]) == int(inputs.d2t[0]):
            if currently_in_test_context():
                event("named divergence: all -inf row with d2t[0] != 0")
        else:
            wrong.append(row)
    if wrong:
        row = lead_row(tokens, expected, wrong)
        rule, lines = whole_batch_rule(impl, want, tokens, wrong, row)
        fail(rule, lines, impl, inputs, prop)


# What explain() names by a row's look rather than by a model: a rule of the whole batch that fits goes first.
FALLBACKS = (NON_MAXIMAL, NAN_NOT_MAX, TIE_IN_SHARD, TIE_HIGHER_RANK, TIE_BY_RANK, ANOTHER_ROW, "global id off by one")


def whole_batch_rule(impl: Impl, want, tokens: torch.Tensor, wrong: list[int], row: int) -> tuple[str, list[str]]:
    """The rule the wrong ``tokens`` broke.  Where the layout has a rule of its own (layouts.py), its model goes
    first: attention data parallel's segments (after a model of the pairs' reduction, which must fit every wrong
    row), one rank's copy of the inputs.  Elsewhere the row's own rules do (explain), and a model of the pairs'
    reduction replaces only a rule named by the look of the row or of the id (padding returned, say)."""
    inputs = want.inputs
    if inputs.dp_rows is not None:
        rank = next(r for r in range(inputs.tp) if row < sum(inputs.dp_rows[: r + 1]))
        found = reduction_rule(want, tokens, wrong) or segment_rule(want, tokens, rank)
    else:
        found = one_ranks_inputs(inputs, tokens)
        found = None if found is None else (found[0], [found[1]])
    if found is not None:
        return found
    rule, lines = explain(want, row, int(tokens[row]), tokens, impl)
    if rule.startswith(FALLBACKS) or non_token_rule(inputs, int(tokens[row])) is not None:
        return reduction_rule(want, tokens, wrong) or (rule, lines)
    return rule, lines


def check_output_contract(impl: Impl, inputs: Inputs) -> None:
    tokens = run_checked(impl, inputs, OUTPUT_CONTRACT)
    for row in (~is_token(inputs, tokens)).nonzero().flatten().tolist():  # one pass over the ids, not one per row
        tok = int(tokens[row])  # only a row that is no token asks the oracle (whether it is the named divergence)
        if not (tok == 0 and is_named_divergence(inputs, answer(inputs).draft_logits[row])):
            fail(non_token_rule(inputs, tok), [f"row {row}"], impl, inputs, OUTPUT_CONTRACT)


def _mismatch(impl: Impl, inputs: Inputs, tokens: torch.Tensor, rows: torch.Tensor, prop: str, why: str) -> None:
    """Report a row in ``rows`` where ``tokens`` break token equality (the first, or the first that shows rows
    shifted), with ``why``."""
    want = answer(inputs)
    row = lead_row(tokens, want.tokens, rows.tolist())
    rule, lines = whole_batch_rule(impl, want, tokens, rows.tolist(), row)
    fail(f"{why}; {rule}", lines, impl, inputs, prop)


def check_tp_invariance(impl: Impl, inputs: Inputs, tps: Sequence[int] | None = None) -> None:
    """The tokens at ``inputs.tp`` and at each of ``tps`` (default: every other tp the backend runs) agree.

    A failure's repro file holds the side that went wrong and, as ``tps``, the tp it is compared with.
    """
    others = [tp for tp in (backend_tps(inputs.backend) if tps is None else tps) if tp != inputs.tp]
    with repro_extra(tps=others):
        base = run_checked(impl, inputs, TP_INVARIANCE)
    for tp in others:
        other = inputs.with_tp(tp)
        with repro_extra(tps=[inputs.tp]):
            tokens = run_checked(impl, other, TP_INVARIANCE)
        if torch.equal(tokens, base):
            continue  # the oracle is asked only where the two differ
        base_oracle = answer(inputs).tokens
        same_oracle = answer(other).tokens == base_oracle  # fp matmuls of other shard shapes may round apart
        if currently_in_test_context() and not bool(same_oracle.all()):
            event("oracle itself changed with tp (matmul numerics); those rows skipped")
        rows = ((tokens != base) & same_oracle).nonzero().flatten()
        if rows.numel():  # this side where it is wrong too, so that its repro file replays the same diagnosis
            base_wrong = bool((base[rows] != base_oracle[rows]).any())
            wrong, bad, against = (inputs, base, tp) if base_wrong else (other, tokens, inputs.tp)
            with repro_extra(tps=[against]):
                _mismatch(
                    impl,
                    wrong,
                    bad,
                    rows,
                    TP_INVARIANCE,
                    f"TP invariance: tokens differ between tp={min(inputs.tp, tp)} and tp={max(inputs.tp, tp)}",
                )


def check_row_independence(impl: Impl, inputs: Inputs, rows: list[int]) -> None:
    with repro_extra(rows=rows):
        _check_row_independence(impl, inputs, rows)


def _check_row_independence(impl: Impl, inputs: Inputs, rows: list[int]) -> None:
    base = run_checked(impl, inputs, ROW_INDEPENDENCE)
    sub = inputs.with_rows(rows)
    tokens = run_checked(impl, sub, ROW_INDEPENDENCE)
    if torch.equal(tokens, base[rows]):
        return  # the oracle is asked only where the two differ
    same_oracle = answer(sub).tokens == answer(inputs).tokens[rows]
    bad = ((tokens != base[rows]) & same_oracle).nonzero().flatten()
    if bad.numel():
        i = int(bad[0])
        fail(
            "row independence: a row's token changed when the rest of the batch changed",
            [f"row {rows[i]} of the full batch gave {int(base[rows[i]])}; as row {i} of {rows}, {int(tokens[i])}"],
            impl,
            inputs,
            ROW_INDEPENDENCE,
        )


def check_determinism(impl: Impl, inputs: Inputs) -> None:
    first = run_checked(impl, inputs, DETERMINISM)
    second = run_checked(impl, inputs, DETERMINISM)
    if not torch.equal(first, second):
        row = int((first != second).nonzero()[0])
        fail(
            "nondeterminism: two runs on identical input differ",
            [f"row {row}: {int(first[row])} then {int(second[row])}"],
            impl,
            inputs,
            DETERMINISM,
        )


def _bad_d2t(kw: dict[str, Any], dup: bool) -> dict[str, Any]:
    vocab = kw["layout"].vocab
    d2t = torch.zeros(vocab, dtype=torch.int64, device=kw["hidden"].device) if kw["d2t"] is None else kw["d2t"].clone()
    if dup:  # draft ids 0 and 1 share a target
        d2t[1] = d2t[0] - 1
    else:  # the last draft id maps below 0
        d2t[-1] = -vocab
    return {**kw, "d2t": d2t}


_OTHER_DTYPE = {torch.float32: torch.bfloat16, torch.bfloat16: torch.float16, torch.float16: torch.float32}

# name -> (how to break one rank's arguments, a word the error message must contain, minimal vocab)
BAD_INPUTS: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], str, int]] = {
    "negative scale": (lambda kw: {**kw, "scale": -abs(kw["scale"])}, "scale", 1),
    "zero scale": (lambda kw: {**kw, "scale": 0.0}, "scale", 1),
    "non-positive soft cap": (lambda kw: {**kw, "soft_cap": -1.0}, "soft_cap", 1),
    "d2t target out of range": (lambda kw: _bad_d2t(kw, dup=False), "d2t", 1),
    "d2t not injective": (lambda kw: _bad_d2t(kw, dup=True), "d2t", 2),
    "hidden size mismatch": (lambda kw: {**kw, "hidden": kw["hidden"][:, :-1]}, "shape", 1),
    "dtype mismatch": (lambda kw: {**kw, "weight": kw["weight"].to(_OTHER_DTYPE[kw["weight"].dtype])}, "dtype", 1),
    "bias length mismatch": (
        lambda kw: {**kw, "bias": kw["weight"].new_zeros(kw["weight"].shape[0] + 1)},
        "bias",
        1,
    ),
}


def check_rejects(impl: Impl, inputs: Inputs, bad: str) -> None:
    """Every rank gets the broken argument; some rank must raise a ValueError naming it."""
    with repro_extra(bad=bad):
        _check_rejects(impl, inputs, bad)


def _check_rejects(impl: Impl, inputs: Inputs, bad: str) -> None:
    tweak, word, _ = BAD_INPUTS[bad]
    try:
        results, _ = run_ranks(impl, inputs, tweak)
    except (RankTimeout, ImplementationExit) as exc:
        ended(exc, impl, inputs, REJECTS, f" on bad input ({bad})")
    except ValueError as exc:
        if word not in str(exc):
            fail(
                f"bad input ({bad}) rejected with an unclear message",
                [f"{type(exc).__name__}: {exc}", f"the message should name {word!r}"],
                impl,
                inputs,
                REJECTS,
            )
        return
    except Exception as exc:
        name = getattr(exc, "remote_type", type(exc).__name__)
        fail(f"bad input ({bad}) raised {name} instead of ValueError", [str(exc)], impl, inputs, REJECTS)
    fail(
        f"bad input accepted: {bad}",
        [f"rank 0 returned {results[0]!r} instead of raising ValueError"],
        impl,
        inputs,
        REJECTS,
    )
