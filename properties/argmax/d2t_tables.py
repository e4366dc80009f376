"""Dynamic counterexamples for d2t tables: tie two draft ids at a row's maximum, compare the paths.

For an inversion ``i < j`` with ``map(i) > map(j)``, the local path keeps the
first draft id and returns ``map(i)``; the classic path scatters first and
returns the smaller target ``map(j)``.  Random ties almost never hit the one
inverted pair of a large table, so :func:`tie_pairs` aims at the inversions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from properties.argmax.checks import run_checked
from properties.argmax.top_k import run_top_k
from properties.cases.case import Case, Inputs
from properties.cases.tensors import eagle3_d2t
from properties.harness.settings import current
from properties.oracle import answer
from sharded.impls import Impl
from sharded.layout import vocab_parallel_layout

PROP = "d2t safety: a tie between two draft ids gives both paths the same token"


@dataclass(frozen=True)
class Finding:
    """Two draft ids whose tie makes the local path and the classic path disagree."""

    draft_vocab: int
    target_vocab: int
    i: int
    j: int
    tied_logit: float
    local_token: int
    classic_token: int
    path: str = "local argmax"  # or "local top-k": then the tokens are each path's first of the top k

    def __str__(self) -> str:
        first = "" if self.path == "local argmax" else " first"
        return (
            f"FLAGGED: this d2t table ({self.draft_vocab} draft ids into {self.target_vocab} targets) is not safe "
            f"for {self.path}. Draft ids {self.i} and {self.j} tie at logit {self.tied_logit}: the local path "
            f"returns {self.local_token} = {self.i} + d2t[{self.i}]{first}, the classic path returns "
            f"{self.classic_token}{first}."
        )


def targets_of(d2t: torch.Tensor) -> torch.Tensor:
    return torch.arange(d2t.numel(), device=d2t.device) + d2t


def tie_inputs(d2t: torch.Tensor, target_vocab: int, i: int, j: int, tp: int = 1, backend: str = "sim") -> Inputs:
    """One row where draft ids i and j share the maximum logit 1 and every other id has -1."""
    vocab = d2t.numel()
    layouts = vocab_parallel_layout(vocab, tp)
    weight = torch.zeros(vocab, 3, device=d2t.device)  # padding rows: zeros
    weight[:, 0] = -1.0
    weight[[i, j], 0] = 1.0
    hidden = torch.tensor([[1.0, 0.0, 0.0]], device=d2t.device)
    return Inputs(
        Case(batch=1, hidden=3, vocab=vocab, tp=tp),
        hidden,
        weight,
        None,
        layouts,
        d2t,
        target_vocab,
        (f"tie at draft ids {i}, {j}",),
        backend,
    ).on(current().device)


def check_tie(
    impl: Impl, d2t: torch.Tensor, target_vocab: int, i: int, j: int, k: int | None = None, **where
) -> Finding | None:
    """Run the tie case on ``impl`` and the oracle; a :class:`Finding` when their tokens differ.

    With ``k``, ``impl`` is a top-k and both tied ids are among the top k: the paths differ in their order.
    """
    inputs = tie_inputs(d2t, target_vocab, i, j, **where)
    if k is None:
        local, classic = run_checked(impl, inputs, PROP), answer(inputs).tokens
    else:
        local, classic = run_top_k(impl, inputs, k, PROP)[0][0], answer(inputs).top_k(k)[0][0]
    if torch.equal(local, classic):
        return None
    path = "local argmax" if k is None else "local top-k"
    return Finding(d2t.numel(), target_vocab, i, j, 1.0, int(local[0]), int(classic[0]), path)


def tie_pairs(d2t: torch.Tensor) -> st.SearchStrategy[tuple[int, int]]:
    """Pairs ``i < j`` to tie: inverted pairs when the table has any (shrinking toward the first
    inverted draft id and its smallest later target), else any pair."""
    targets = targets_of(d2t)
    n = targets.numel()
    suffix_min = targets.flip(0).cummin(0).values.flip(0)
    starts = (targets[:-1] > suffix_min[1:]).nonzero().flatten()
    if starts.numel() == 0:
        return st.integers(0, max(n - 2, 0)).flatmap(lambda i: st.tuples(st.just(i), st.integers(i + 1, n - 1)))

    def later(i: int) -> st.SearchStrategy[tuple[int, int]]:
        below = (targets[i + 1 :] < targets[i]).nonzero().flatten() + i + 1
        below = below[torch.argsort(targets[below])]  # the smallest target first
        return st.integers(0, below.numel() - 1).map(lambda m: (i, int(below[m])))

    return st.integers(0, starts.numel() - 1).flatmap(lambda k: later(int(starts[k])))


def find_counterexample(impl: Impl, d2t: torch.Tensor, target_vocab: int, budget: settings, **where) -> Finding | None:
    """Search tie pairs with Hypothesis and shrink to a minimal one; None if no pair breaks equality.
    ``where``: ``backend`` and ``tp``, as :func:`tie_inputs` takes them."""
    if d2t.numel() < 2:
        return None
    # no explain phase: it only annotates a failure report, which find() never prints (it was 95 of 99 runs of a
    # shrunk inversion)
    budget = settings(budget, phases=[phase for phase in budget.phases if phase is not Phase.explain])
    try:
        i, j = find(
            tie_pairs(d2t), lambda p: check_tie(impl, d2t, target_vocab, *p, **where) is not None, settings=budget
        )
    except NoSuchExample:
        return None
    return check_tie(impl, d2t, target_vocab, i, j, **where)


@st.composite
def increasing_tables(draw: st.DrawFn, max_vocab: int = 3000) -> tuple[torch.Tensor, int]:
    """EAGLE3-style strictly increasing tables (sometimes all zeros) and their target vocabulary."""
    vocab = draw(st.integers(2, max_vocab))
    target_vocab = vocab + draw(st.integers(0, 3 * vocab))
    if draw(st.integers(0, 9)) == 0:
        return torch.zeros(vocab, dtype=torch.int64, device="cpu"), target_vocab
    g = torch.Generator(device="cpu").manual_seed(draw(st.integers(0, 2**32 - 1)))
    return eagle3_d2t(vocab, target_vocab, g), target_vocab


@st.composite
def non_monotone_tables(draw: st.DrawFn, max_vocab: int = 3000) -> tuple[torch.Tensor, int]:
    """An increasing table with targets moved out of order: a swap, an adjacent swap, or a reversed run."""
    d2t, target_vocab = draw(increasing_tables(max_vocab))
    targets = targets_of(d2t)
    n = targets.numel()
    i = draw(st.integers(0, n - 2))
    how = draw(st.sampled_from(("adjacent swap", "swap", "reversed run")))
    j = i + 1 if how == "adjacent swap" else draw(st.integers(i + 1, n - 1))
    if how == "reversed run":
        targets[i : j + 1] = targets[i : j + 1].flip(0).clone()
    else:
        targets[[i, j]] = targets[[j, i]]
    return targets - torch.arange(n, device=targets.device), target_vocab
