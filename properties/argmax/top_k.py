"""The top-k property bodies: ids in order and values bit for bit against the classic top-k.

Like :mod:`properties.argmax.checks`, independent of Hypothesis, so meta-tests and repro files reuse them.
"""

from __future__ import annotations

from functools import partial

import torch
from hypothesis import event
from hypothesis.control import currently_in_test_context

from properties.argmax.checks import run_checked, run_valid
from properties.argmax.diagnosis import (
    argmax_equal,
    draft_targets,
    is_named_divergence,
    is_token,
    non_token_rule,
    value_bits,
)
from properties.cases.case import Inputs
from properties.failures import fail, repro_extra
from properties.oracle import answer
from sharded.impls import Impl

TOP_K_EXACT = "top-k exactness: the classic top-k's ids, in order, and their logits bit for bit"
TOP_K_CONTRACT = "top-k output contract: int64 ids [B, k] and values [B, k] in the head's dtype or float32, tokens only"
TOP_K_TOP1 = "top-1 of the top-k is the argmax implementation's token"
TOP_K_DETERMINISM = "top-k determinism: the same input gives the same ids and values"
VALUE_DTYPES = (torch.float32,)  # besides the head's own dtype: float32 holds bf16 and fp16 exactly
# Log-probabilities (``fn.values = "log_probs"``) are judged against the classic log-softmax within this
# tolerance: a log-partition combined across ranks cannot be bit-identical to one over the whole row.  It widens by
# float32's rounding at the row's largest logit: ``logit - log_partition`` rounds numbers of that size, however exact
# the partition (4 ulps: the partition's own rounding and the subtraction's, twice over).
LOG_PROB_TOLERANCE = 1e-5
LOG_PROB_ULPS = 4


def run_top_k(impl: Impl, inputs: Inputs, k: int, prop: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a top-k implementation on every rank; enforce types, shapes and agreement across ranks."""
    results = run_valid(impl, inputs, prop, lambda kw: {**kw, "k": k})
    want = (inputs.case.batch, k)
    for rank, out in enumerate(results):
        ids, values = out if isinstance(out, tuple) and len(out) == 2 else (out, None)
        ok_ids = isinstance(ids, torch.Tensor) and ids.dtype == torch.int64 and tuple(ids.shape) == want
        ok_values = (
            isinstance(values, torch.Tensor)
            and values.dtype in (inputs.weight.dtype, *VALUE_DTYPES)
            and tuple(values.shape) == want
        )
        if not (ok_ids and ok_values):
            got = " and ".join(
                f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                for t in (ids, values)
            )
            fail(
                f"top-k output contract: rank {rank} returned {got}, expected (int64 {want}, {want} values)",
                [],
                impl,
                inputs,
                prop,
                k=k,
            )
        if not (torch.equal(ids, results[0][0]) and bitwise_equal(values, results[0][1])):
            fail("ranks disagree on the top-k", [f"rank 0 and rank {rank} differ"], impl, inputs, prop, k=k)
    return results[0]


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, compared in float32 (which holds every bf16 and fp16 value exactly), a NaN matching a NaN:
    torch's own fp16-to-fp32 cast gives one NaN two payloads, by whether it runs vectorised."""
    if a.shape != b.shape:
        return False
    a, b = a.float(), b.float()
    nan = a.isnan()
    same_bits = torch.equal(a.masked_fill(nan, 0).view(torch.int32), b.masked_fill(nan, 0).view(torch.int32))
    return torch.equal(nan, b.isnan()) and same_bits


def log_softmax_at(values: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)`` at the chosen ``values``, computed as the classic path's ``log_softmax`` does: shifted
    by the row's maximum first, so that two large, nearly equal numbers are never subtracted after rounding."""
    x = logits.float()
    top = x.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # an all -inf, +inf or NaN row: unshifted
    return (values.float() - shift) - torch.log(torch.exp(x - shift).sum(dim=-1, keepdim=True))


def _close(a: torch.Tensor, b: torch.Tensor, magnitude: float = 0.0) -> bool:
    """Within :data:`LOG_PROB_TOLERANCE` (relative and absolute), widened by :data:`LOG_PROB_ULPS` float32 ulps of
    ``magnitude`` (the row's largest finite logit); NaN matches NaN, an infinity its own sign."""
    tol = LOG_PROB_TOLERANCE
    atol = tol + LOG_PROB_ULPS * torch.finfo(torch.float32).eps * magnitude
    return a.shape == b.shape and bool(torch.isclose(a.float(), b.float(), rtol=tol, atol=atol, equal_nan=True).all())


def _magnitude(logits: torch.Tensor) -> float:
    """The largest finite |logit| of a row, 0 if none is finite."""
    x = logits.float()
    finite = x[torch.isfinite(x)]
    return float(finite.abs().max()) if finite.numel() else 0.0


def _slot_rule(inputs: Inputs, logits: torch.Tensor, want: list[int], got: list[int], slot: int) -> str:
    """Why slot ``slot`` of a row holds ``got[slot]`` instead of ``want[slot]``, named from the logits."""
    rule = non_token_rule(inputs, got[slot])
    if rule is not None:
        return rule
    draft = {int(t): d for d, t in enumerate(draft_targets(inputs).tolist())}
    expected, chosen = logits[draft[want[slot]]], logits[draft[got[slot]]]
    if argmax_equal(expected, chosen):
        return "top-k tie order: equal logits must come in ascending id"
    if bool(torch.isnan(expected)) and not bool(torch.isnan(chosen)):
        return "top-k order: NaN counts as the largest logit"
    if got[slot] in want and want.index(got[slot]) > slot:
        return "top-k order: a smaller logit placed before a larger one"
    return "top-k chose a non-maximal logit"


def check_top_k_exact(impl: Impl, inputs: Inputs, k: int) -> None:
    with repro_extra(k=k):
        ids, values = run_top_k(impl, inputs, k, TOP_K_EXACT)
        logits = answer(inputs).draft_logits
        want_ids, want_values = answer(inputs).top_k(k)
        # The named divergence, extended to k: the scatter leaves -inf on targets no draft id maps to, and the
        # classic top k takes the lowest of them for its -inf slots; a local path can only name mapped targets.
        mapped_ids = want_ids  # the named divergence's side, computed only where a row differs
        if inputs.d2t is not None and not torch.equal(ids, want_ids):
            mapped_ids = answer(inputs).top_k(k, mapped_only=True)[0]
        log_probs = getattr(impl.fn, "values", "logits") == "log_probs"
        if not log_probs and torch.equal(ids, want_ids) and bitwise_equal(values, want_values):
            return  # the whole batch at once: what the rows below would each find
        if log_probs:  # the classic log-softmax of each chosen token, over the token ids
            want_values = log_softmax_at(want_values, logits)
        for row in range(inputs.case.batch):
            want, got, mapped = want_ids[row].tolist(), ids[row].tolist(), mapped_ids[row].tolist()
            if got == mapped != want:
                if currently_in_test_context():
                    event("named divergence: -inf top-k slots on mapped targets")
            elif want != got:
                want = mapped  # both sides agree before the -inf slots, and mapped names draft ids only
                slot = next(s for s in range(k) if want[s] != got[s])
                fail(
                    _slot_rule(inputs, logits[row], want, got, slot),
                    [f"row {row}: expected ids {want}", f"row {row}: got ids {got} (first difference at slot {slot})"],
                    impl,
                    inputs,
                    TOP_K_EXACT,
                    k=k,
                )
            same = partial(_close, magnitude=_magnitude(logits[row])) if log_probs else bitwise_equal
            if not same(values[row], want_values[row]):
                slot = next(s for s in range(k) if not same(values[row, s : s + 1], want_values[row, s : s + 1]))
                fail(
                    f"top-k log-probabilities differ from the classic log-softmax by more than {LOG_PROB_TOLERANCE:g} "
                    f"and {LOG_PROB_ULPS} float32 ulps of the row's largest logit"
                    if log_probs
                    else f"top-k values not bit-exact: id {got[slot]}'s logit changed",
                    [
                        f"row {row} slot {slot}: expected {value_bits(want_values[row, slot])}",
                        f"row {row} slot {slot}: got {value_bits(values[row, slot])}",
                    ],
                    impl,
                    inputs,
                    TOP_K_EXACT,
                    k=k,
                )


def check_top_k_contract(impl: Impl, inputs: Inputs, k: int) -> None:
    with repro_extra(k=k):
        ids, _ = run_top_k(impl, inputs, k, TOP_K_CONTRACT)
        tokens = is_token(inputs, ids)  # one pass over every slot, not one per slot
        ordered = ids.sort(dim=1).values
        if bool(tokens.all()) and not bool((ordered[:, 1:] == ordered[:, :-1]).any()):
            return  # every slot a token, no id twice in a row: what the rows below would each find
        for row, slots in enumerate(ids.tolist()):
            if not bool(tokens[row].all()):
                slot = int((~tokens[row]).nonzero()[0])
                rule = non_token_rule(inputs, slots[slot])
                fail(rule, [f"row {row} slot {slot}"], impl, inputs, TOP_K_CONTRACT, k=k)
            if len(set(slots)) != k:
                fail("top-k returned an id twice", [f"row {row}: {slots}"], impl, inputs, TOP_K_CONTRACT, k=k)


def check_top1_is_argmax(topk_impl: Impl, argmax_impl: Impl, inputs: Inputs, k: int) -> None:
    """Slot 0 of the top k is the argmax implementation's token (rows of the named divergence aside)."""
    with repro_extra(k=k, argmax_impl=str(argmax_impl)):
        ids, _ = run_top_k(topk_impl, inputs, k, TOP_K_TOP1)
        tokens = run_checked(argmax_impl, inputs, TOP_K_TOP1)
        want = answer(inputs)  # its logits and tokens computed only for a row where the two differ
        for row in (ids[:, 0] != tokens).nonzero().flatten().tolist():
            if is_named_divergence(inputs, want.draft_logits[row]) and int(tokens[row]) == 0:
                continue  # the argmax implementation took the classic path's side of the divergence
            which = ""  # the top-k is off the classic path: the argmax implementation is not
            if int(tokens[row]) != int(want.tokens[row]):
                right = int(ids[row, 0]) == int(want.tokens[row])
                which = ", whose token is not the classic path's" if right else ", and neither is the classic path's"
            fail(
                f"top-1 differs from the argmax implementation {argmax_impl}{which}",
                [f"row {row}: top-k slot 0 is {int(ids[row, 0])}, argmax is {int(tokens[row])}"],
                topk_impl,
                inputs,
                TOP_K_TOP1,
                k=k,
            )


def check_top_k_determinism(impl: Impl, inputs: Inputs, k: int) -> None:
    with repro_extra(k=k):
        first = run_top_k(impl, inputs, k, TOP_K_DETERMINISM)
        second = run_top_k(impl, inputs, k, TOP_K_DETERMINISM)
        if not (torch.equal(first[0], second[0]) and bitwise_equal(first[1], second[1])):
            fail("top-k nondeterminism: two runs on identical input differ", [], impl, inputs, TOP_K_DETERMINISM, k=k)
