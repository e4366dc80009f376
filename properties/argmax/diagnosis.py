"""Turn a wrong token into the rule it broke, the minimal case and a replay command."""

from __future__ import annotations

from dataclasses import replace

import torch

from properties.argmax.faults import SOFT_CAP_SKIPPED, explaining, named
from properties.cases.case import Inputs
from properties.harness.runner import run_ranks
from properties.oracle import Answer, answer
from sharded.layout import ShardLayout

NAN_NOT_MAX = "NaN not treated as the maximum: the first NaN must win"
TIE_IN_SHARD = "tie within a shard resolved to a later index"
TIE_HIGHER_RANK = "tie across ranks resolved to the higher rank"
TIE_BY_RANK = "tie across ranks resolved by rank, not by id: a lower rank's larger (added) id won"
ANOTHER_ROW = "another row's token"
NON_MAXIMAL = "chose a non-maximal logit"
OFFSET_FROM_WIDTH = "id offset from rank x width on uneven shards"
EVEN_WIDTHS_ASSUMED = "ids placed as if every rank held the same number of columns, on uneven shards"


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
    if lay0.widths:  # uneven shards: base ids only, padding at and above the head's ids
        at = next((lay for lay in inputs.layouts if lay.start <= got < lay.start + lay.size), None)
        if at is not None:
            return f"base padding returned: {got} is padding row {got - at.start} of rank {at.rank} (uneven shards)"
        return f"returned id out of range: {got} is no row of the head"
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


def _misplaced_winner(
    inputs: Inputs, logits: torch.Tensor, first: int, got: int, targets: torch.Tensor, others: tuple = ()
) -> str | None:
    """The rule when ``got`` is a winner numbered wrong: on uneven shards, every rank's rows numbered from rank x
    some width; the row in its shard of an id holding the maximum, without the rank's first id; or the winner's
    target mapped through d2t a second time; None if it is neither.  ``others``: the batch's other wrong rows as
    (logits, token returned), which the uneven rule must reproduce too."""
    uneven = _uneven_offset(inputs, logits, first, got, targets, others)
    if uneven is not None:
        return uneven
    for token in _maximal(logits, first):
        lay = owner(inputs, token)
        local = lay.row_of(token)
        if lay.start and local is not None and local < len(targets) and int(targets[local]) == got:
            mapped = "" if inputs.d2t is None else f", which d2t maps to {got}"
            return (
                f"global id without its rank's offset: draft id {token} is row {local} of rank {lay.rank}, whose ids "
                f"start at {lay.start}, and came back as id {local}{mapped}"
            )
    once = int(targets[first])
    if inputs.d2t is not None and once < len(targets) and got == int(targets[once]) != once:
        return f"d2t applied twice: draft id {first} maps to target {once}, which was mapped again, to {got}"
    return None


def _maximal(logits: torch.Tensor, first: int) -> list[int]:
    """Up to 64 ids holding a row's maximum (its NaNs, where the first maximum is one)."""
    best = torch.isnan(logits) if bool(torch.isnan(logits[first])) else logits == logits[first]
    return best.nonzero().flatten()[:64].tolist()


def _uneven_widths(lay: ShardLayout) -> tuple[tuple[str, int], ...]:
    """The widths a rank on uneven shards may number its rows by: its own (the offset), rank 0's, the widest's, or
    the head's rows / tp (a gather that assumes even widths)."""
    widths = lay.widths
    return (
        ("its own width", widths[lay.rank]),
        ("rank 0's width", widths[0]),
        ("the widest rank's", max(widths)),
        ("the head's rows / tp", lay.padded_vocab // lay.tp),
        ("ceil(ids / tp)", -(-lay.org_vocab // lay.tp)),
    )


def _numbered(inputs: Inputs, logits: torch.Tensor, first: int, rule: int, targets: torch.Tensor) -> tuple[int, int]:
    """A row's pick where each rank numbers its rows from rank x the width of rule ``rule`` (:func:`_uneven_widths`):
    the smallest id so numbered among the ids holding the maximum, as the exchange picks, and the draft id it
    numbers; the pick is mapped through d2t (-1 where it has no target)."""
    placed = []
    for token in _maximal(logits, first):
        lay = owner(inputs, token)
        placed.append((lay.rank * _uneven_widths(lay)[rule][1] + lay.row_of(token), token))
    pick, token = min(placed)
    mapped = int(targets[pick]) if pick < len(targets) else pick if inputs.d2t is None else -1
    return mapped, token


def _uneven_offset(
    inputs: Inputs, logits: torch.Tensor, first: int, got: int, targets: torch.Tensor, others: tuple = ()
) -> str | None:
    """On uneven shards, the rule when every rank numbers its rows from rank x some width and that gives ``got`` and
    every token of ``others``: the first width that does (on the widest rank, its own width and the widest's give
    the same id; the ranks it ties with tell them apart)."""
    if not inputs.layouts[0].widths:
        return None
    for rule, (name, _) in enumerate(_uneven_widths(inputs.layouts[0])):
        mapped, token = _numbered(inputs, logits, first, rule, targets)
        lay = owner(inputs, token)
        width = _uneven_widths(lay)[rule][1]
        if mapped != got or lay.rank * width == lay.start:
            continue
        if all(_numbered(inputs, row, int(torch.argmax(row)), rule, targets)[0] == tok for row, tok in others):
            local = lay.row_of(token)
            return (
                f"{OFFSET_FROM_WIDTH if rule == 0 else EVEN_WIDTHS_ASSUMED}: draft id {token} is row {local} of rank "
                f"{lay.rank}, whose ids start at {lay.start} (widths {list(lay.widths)}); {lay.rank} x {width} "
                f"({name}) + {local} = {lay.rank * width + local}"
            )
    return None


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


def explain(
    want: Answer, row: int, got: int, tokens: torch.Tensor | None = None, impl: object = None
) -> tuple[str, list[str]]:
    """The rule a wrong token ``got`` on ``row`` broke, judged against the oracle's answer ``want`` (the check's own,
    handed over) and named only when the evidence proves it (docs/checks.md: Rules from evidence).  ``tokens``, the
    implementation's whole answer, and ``impl``, run on the row alone, show a row that holds another row's token.

    What the returned id is comes first, then the logits: NaN, then a fault whose model chooses exactly that id,
    then ties by position (only between logits equal in the head's dtype), then another row's token, then what the
    id's bits tell.
    """
    inputs, logits = want.inputs, want.draft_logits[row]
    first = int(torch.argmax(logits))
    targets = draft_targets(inputs)
    lines = [f"row {row}: expected token {int(targets[first])} ({_where(inputs, first, logits)})"]
    hits = (targets == got).nonzero().flatten()
    tied = bool(hits.numel()) and argmax_equal(logits[int(hits[0])], logits[first])
    if inputs.d2t is not None and got == first != int(targets[first]) and not tied:
        lines.append(f"row {row}: got token {got}")
        return f"d2t mapping skipped: returned draft id {first} instead of target {int(targets[first])}", lines
    uneven = tokens is not None and bool(inputs.layouts[0].widths)  # only a width rule asks the other rows
    others = _other_wrong_rows(want, row, tokens) if uneven and not tied else ()
    misplaced = None if tied else _misplaced_winner(inputs, logits, first, got, targets, others)
    if misplaced is not None:
        lines.append(f"row {row}: got token {got}")
        return misplaced, lines
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
    if bool(torch.isnan(logits[first])):  # whatever won instead of the first NaN, a number or a later NaN
        at, mine = owner(inputs, first).rank, owner(inputs, chosen).rank
        if bool(torch.isnan(logits[chosen])) and at != mine:  # the evidence of a rank-order merge too: say so
            lines.append(f"the chosen id is a later NaN: rank {at} lost its NaN, or the ranks' NaNs went by rank order")
        return NAN_NOT_MAX, lines
    faults = list(explaining(want, row, chosen, tied))
    if faults:
        hows = " and ".join(dict.fromkeys(f.how for f in faults))
        lines.append(f"the chosen id is the first maximum of the logits {hows}")
        return named(faults), lines
    if tied:
        return _tie_rule(want, row, first, chosen), lines
    source = None if tokens is None else row_source(want, row, tokens, impl)
    if source is not None:
        lines.append(source[1])
        return f"{ANOTHER_ROW}: {source[0]}", lines
    rule = carried_rule(first, chosen)
    if rule is not None:
        return rule, lines
    if abs(chosen - first) == 1:
        return f"global id off by one (draft id {first} reported as {chosen})", lines
    return NON_MAXIMAL, lines


def _other_wrong_rows(want: Answer, row: int, tokens: torch.Tensor) -> tuple:
    """The batch's wrong rows other than ``row`` and the named divergence's, as (logits, token returned), up to 16
    (none where ``tokens`` are not one per row of the batch)."""
    if tokens.shape != want.tokens.shape:
        return ()
    logits, wrong = want.draft_logits, (tokens != want.tokens).nonzero().flatten().tolist()
    rows = [r for r in wrong if r != row and not is_named_divergence(want.inputs, logits[r])]
    return tuple((logits[r], int(tokens[r])) for r in rows[:16])


def carried_rule(first: int, chosen: int) -> str | None:
    """The rule when ``chosen`` is the id ``first`` rounded to bfloat16 or float16 (carried in a float type too
    narrow for it), naming each of the two it fits; None if it is not."""
    as_float = torch.tensor(float(first), device="cpu")
    rounded = " or ".join(str(d)[6:] for d in (torch.bfloat16, torch.float16) if float(as_float.to(d)) == chosen)
    if rounded and abs(chosen - first) == 1:  # the id alone cannot tell these two apart
        return f"global id off by one, or id carried in {rounded}: {first} reported as {chosen} fits both"
    if rounded and chosen != first:  # every type it fits (compared as numbers, not in the narrow type)
        return f"id carried in {rounded}: {first} rounds to {chosen}"
    return None


def _tie_rule(want: Answer, row: int, first: int, chosen: int) -> str:
    """A later id chose among logits equal in the head's dtype, and no fault's model explains which: by position."""
    inputs, raw = want.inputs, want.raw_logits[row].float()
    if inputs.case.soft_cap is not None and float(raw[chosen]) > float(raw[first]):
        return SOFT_CAP_SKIPPED
    at, mine = owner(inputs, first).rank, owner(inputs, chosen).rank
    if at == mine:
        return TIE_IN_SHARD
    return TIE_HIGHER_RANK if mine > at else TIE_BY_RANK


def lead_row(tokens: torch.Tensor, expected: torch.Tensor, rows: list[int]) -> int:
    """The row of ``rows`` (wrong ones) to explain: the first, unless a later one shows the batch's rows shifted
    (the first may hold a padding row's answer, which is no row's token)."""
    shifts = _shifts(tokens.tolist(), expected.tolist())
    return next((row for row in rows for s, lo, hi in shifts if lo <= row < hi), rows[0])


def _shifts(tokens: list[int], expected: list[int]) -> list[tuple[int, int, int]]:
    """``(s, lo, hi)`` for each shift ``s != 0``, smallest first, with ``tokens[i] == expected[i + s]`` for every
    row ``lo <= i < hi`` that has a row ``i + s``."""
    batch = len(expected)
    found = []
    for s in sorted(range(1 - batch, batch), key=lambda s: (abs(s), s)):
        lo, hi = max(0, -s), min(batch, batch - s)
        if s and tokens[lo:hi] == expected[lo + s : hi + s]:
            found.append((s, lo, hi))
    return found


def row_source(oracle: Answer, row: int, tokens: torch.Tensor, impl: object = None) -> tuple[str, str] | None:
    """(rule detail, evidence) when wrong ``row`` holds the answer of another row (``oracle``'s tokens say whose),
    None otherwise.

    The whole batch can show it: a shift ``s`` with ``tokens[i] == expected[i + s]`` on every row ``i`` that has a
    row ``i + s`` (rows shifted), or every row's answer in another order (rows swapped).  Otherwise ``impl`` run on
    the row alone can: right alone, wrong in the batch, with another row's token or the token of an all-zero hidden
    state (a row a batch was padded with)."""
    inputs = oracle.inputs
    got, want = tokens.tolist(), oracle.tokens.tolist()
    for s, lo, hi in _shifts(got, want):
        if lo <= row < hi:
            side = "after" if s > 0 else "before"
            covered = f"every row from {lo} to {hi - 1} holds the token of the row {abs(s)} {side} it"
            return f"rows shifted by {s}: row {row} holds row {row + s}'s token", covered
    if sorted(got) == sorted(want):
        evidence = "the batch holds every row's token, in another order"
        return f"rows swapped: row {row} holds row {want.index(got[row])}'s token", evidence
    others = [i for i, token in enumerate(want) if token == got[row] and i != row]
    zero = replace(inputs.with_rows([row]), hidden=torch.zeros_like(inputs.hidden[row : row + 1]))
    padding = not others and got[row] == int(answer(zero).tokens[0])
    if impl is None or not (others or padding) or _alone(impl, inputs, row) != want[row]:
        return None
    evidence = f"row {row} alone gives token {want[row]}"
    if others:
        return f"row {row} holds row {others[0]}'s token", evidence
    return f"row {row} holds the token of an all-zero hidden state, a row the batch was padded with", evidence


def _alone(impl: object, inputs: Inputs, row: int) -> int | None:
    """The implementation's token for ``row`` run as a batch of its own; None if it gives none."""
    try:
        out = run_ranks(impl, inputs.with_rows([row]))[0][0]
        return int(out[0]) if isinstance(out, torch.Tensor) and out.shape == (1,) else None
    except Exception:  # noqa: BLE001 - no answer is no evidence
        return None


def argmax_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal as argmax sees them: NaN equals NaN, -0.0 equals +0.0."""
    return bool(a == b) or bool(torch.isnan(a) & torch.isnan(b))


def _around(logits: torch.Tensor, draft_id: int, width: int = 2) -> str:
    lo, hi = max(0, draft_id - width), min(logits.numel(), draft_id + width + 1)
    return ", ".join(f"{'*' if k == draft_id else ''}{k}: {float(logits[k])!r}" for k in range(lo, hi))


def explain_tokens(impl, inputs: Inputs) -> list[str]:
    """Both tokens on the first row where they differ, the logits around each, and the rank that won."""
    want = answer(inputs)
    expected = want.tokens
    try:
        outputs, _ = run_ranks(impl, inputs)
    except Exception as exc:  # noqa: BLE001 - shown, then judged by the property check
        return [f"the implementation raised {type(exc).__name__}: {exc}"]
    got = outputs[0] if isinstance(outputs[0], torch.Tensor) else None
    if got is not None and inputs.dp_rows is not None and all(isinstance(o, torch.Tensor) for o in outputs):
        got = torch.cat(outputs)  # attention data parallel: every rank's own rows, in rank order
    if got is None or got.shape != expected.shape:
        return [f"the implementation returned {outputs[0]!r}"]
    differ = (got != expected).nonzero().flatten()
    row = int(differ[0]) if differ.numel() else 0
    logits = want.draft_logits[row]
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
