"""The rules of the layouts beyond one even split (spec section 13): ranks whose inputs differ, attention data
parallel's row segments, uneven shards.  Each rule is named from evidence: a model of the fault that gives exactly
what the implementation returned.

* **Ranks that disagree** where their copies of the hidden states differ: each rank's tokens are the classic
  path's over the whole head on its own copy (a replicated module, or a rank-local pick with no broadcast).
* **A token from one rank's inputs**: agreeing ranks whose tokens are the classic path's on one rank's copy of the
  hidden states (broadcast before the head), not on the logits each rank computed for its own shard.
* **Attention data parallel**: a rank returns another segment's rows; a segment trimmed before the reduction
  (each rank reduced its own rows only, so row i met other ranks' row i: each picked from a shard alone).
* **The pairs' reduction**, on any layout: the gathered ``[tp, rows]`` pairs read as ``[rows, tp]`` (rows mixed
  with ranks), or the winner's id summed over the ranks that hold the maximum instead of selected.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from properties.argmax.diagnosis import draft_targets
from properties.cases.case import Inputs
from properties.oracle import Answer, answer

OWN_COPY = "ranks disagree: each rank picked from its own copy of the inputs, with no broadcast"
DISAGREE = "ranks disagree on the output"
ONE_RANKS_INPUTS = "token from one rank's copy of the inputs, not from the logits each rank computed for its shard"
OTHER_SEGMENT = "rows taken from another rank's segment"
SEGMENT_TRIMMED = "segment trimmed before the reduction: each rank reduced its own rows only, so a row met others' rows"
ROWS_MIXED = "rows mixed with ranks: the gathered [tp, rows] pairs were read as [rows, tp]"
INDICES_SUMMED = "ids summed instead of selected: every rank holding the row's maximum added its id"


def alone(inputs: Inputs, rank: int) -> Answer:
    """The oracle on rank ``rank``'s copy of the hidden states over the whole head (every shard from it)."""
    case = replace(inputs.case, rank_ulps=0)
    return answer(replace(inputs, hidden=inputs.rank_hidden[rank], case=case))


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    bits = torch.int32 if a.dtype == torch.float32 else torch.int16
    return int((a.view(bits).long() - b.view(bits).long()).abs().max()) if a.numel() else 0


def disagreement(inputs: Inputs, results: list[torch.Tensor], rank: int) -> tuple[str, list[str]]:
    """The rule and evidence for rank ``rank``'s tokens differing from rank 0's."""
    first, out = results[0], results[rank]
    rows = (out != first).nonzero().flatten().tolist()
    lines = [
        f"rows {rows[:8]}{' ...' if len(rows) > 8 else ''} ({len(rows)} of {len(first)}): rank 0 returned "
        f"{first[rows[:8]].tolist()}, rank {rank} returned {out[rows[:8]].tolist()}"
    ]
    if not inputs.case.rank_ulps:
        return DISAGREE, lines
    copies = inputs.rank_hidden
    lines.append(
        f"the ranks' copies of the hidden states differ by up to {_ulps(copies[0], copies[rank])} ulps between rank 0 "
        f"and rank {rank} (at most {inputs.case.rank_ulps} from the case's on any rank)"
    )
    if all(torch.equal(results[r], alone(inputs, r).tokens) for r in range(inputs.tp)):
        lines.append("each rank's tokens are the classic path's over the whole head on its own copy")
        return OWN_COPY, lines
    return DISAGREE, lines


def one_ranks_inputs(inputs: Inputs, tokens: torch.Tensor) -> tuple[str, str] | None:
    """(rule, evidence) when agreeing ranks' wrong ``tokens`` are the classic path's on one rank's copy of the
    hidden states; None otherwise."""
    if not inputs.case.rank_ulps:
        return None
    fits = [rank for rank in range(inputs.tp) if torch.equal(tokens, alone(inputs, rank).tokens)]
    if not fits:
        return None
    every = " (so is each rank's own copy's: on this case the copies pick alike)" if len(fits) == inputs.tp else ""
    return ONE_RANKS_INPUTS, f"every token is the classic path's on rank {fits[0]}'s copy of the hidden states{every}"


def segment_rule(want: Answer, tokens: torch.Tensor, rank: int) -> tuple[str, list[str]] | None:
    """(rule, evidence) for rank ``rank``'s wrong segment of ``tokens`` (the batch's, in rank order): another
    segment's rows, or each row met other ranks' rows in a reduction of one segment; None if neither fits."""
    counts = want.inputs.dp_rows
    start, count = sum(counts[:rank]), counts[rank]
    got, expected = tokens[start : start + count], want.tokens
    for other in range(len(expected) - count + 1):
        if other != start and count and torch.equal(got, expected[other : other + count]):
            return OTHER_SEGMENT, [
                f"rank {rank} returned the tokens of batch rows [{other}, {other + count}); its segment is "
                f"[{start}, {start + count}) (rows per rank {list(counts)})"
            ]
    lines, best = [], _as_returned(want, shard_bests(want)[1])  # each shard's token alone, for every row
    holds = [lay.num_real + lay.num_added > 0 for lay in want.inputs.layouts]
    for i in (got != expected[start : start + count]).nonzero().flatten().tolist():
        met = [
            (q, sum(counts[:q]) + i)
            for q in range(len(counts))
            if holds[q] and i < counts[q] and int(best[q, sum(counts[:q]) + i]) == int(got[i])
        ]
        if not met:
            return None
        q, row = met[0]
        whose = "its own shard alone" if q == rank else f"rank {q}'s shard, on rank {q}'s request (batch row {row})"
        lines.append(f"rank {rank}'s row {i} (batch row {start + i}) got {int(got[i])}: the maximum of {whose}")
    return (SEGMENT_TRIMMED, [*lines[:3], f"rows per rank {list(counts)}"]) if lines else None


def shard_bests(want: Answer) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's (value, draft id) pair for every row ``[tp, B]``, as a correct local pick makes them (a rank
    without tokens offers ``-inf`` at its first id)."""
    logits, lays = want.draft_logits, want.inputs.layouts
    values = logits.new_full((len(lays), logits.shape[0]), float("-inf"))
    ids = torch.tensor([[lay.start] for lay in lays], device=logits.device).expand(-1, logits.shape[0]).clone()
    for lay in lays:
        tokens = lay.token_ids(logits.device)
        if tokens.numel():
            values[lay.rank], at = logits[:, tokens].max(dim=-1)
            ids[lay.rank] = tokens[at]
    return values, ids


def _as_returned(want: Answer, ids: torch.Tensor) -> torch.Tensor:
    """Draft ids as a faulty path returns them: through d2t where they are draft ids, as they are elsewhere."""
    targets = draft_targets(want.inputs)
    inside = (ids >= 0) & (ids < len(targets))
    return torch.where(inside, targets[ids.clamp(0, len(targets) - 1)], ids)


def reduction_rule(want: Answer, tokens: torch.Tensor, wrong: list[int]) -> tuple[str, list[str]] | None:
    """(rule, evidence) where a model of the pairs' reduction gives ``tokens`` on every ``wrong`` row (and differs
    from the classic path somewhere); None if none does."""
    if want.inputs.tp < 2:  # (where the ranks' copies differ, each rank's pair is its own copy's: shard_bests)
        return None
    values, ids = shard_bests(want)
    tp, batch = values.shape
    rows = torch.tensor(wrong, device=tokens.device)
    flat_values, flat_ids = values.reshape(batch, tp), ids.reshape(batch, tp)  # a reshape, not a transpose
    mixed = _as_returned(want, flat_ids.gather(1, flat_values.argmax(dim=1, keepdim=True)).squeeze(1))
    if torch.equal(mixed[rows], tokens[rows]):
        row = wrong[0]
        return ROWS_MIXED, [
            f"row {row} met the pairs at flat positions {row * tp} to {row * tp + tp - 1} of the gathered "
            f"[{tp}, {batch}] pairs, rows {sorted({(row * tp + j) % batch for j in range(tp)})} of ranks "
            f"{sorted({(row * tp + j) // batch for j in range(tp)})}"
        ]
    top = values.max(dim=0).values
    holders = values == top
    if bool(torch.isnan(values).any(dim=0)[rows].any()) or not bool((holders.sum(0)[rows] > 1).any()):
        return None
    total = (ids * holders).sum(dim=0)
    apart = bool(((total.unsqueeze(0) != ids) | ~holders).all(dim=0)[rows].any())  # a sum no holder's id explains
    summed = _as_returned(want, total)
    if apart and torch.equal(summed[rows], tokens[rows]):
        row = wrong[0]
        held = [int(ids[r, row]) for r in range(tp) if bool(holders[r, row])]
        return INDICES_SUMMED, [f"row {row}: ranks' ids {held} hold the maximum, and their sum {sum(held)} came back"]
    return None
