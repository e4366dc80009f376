"""Each rank gets its own copy of its arguments: shards and the oracle's logits are kept for a whole example, so an
implementation that writes into its arguments must change neither its peers' inputs, nor a later run's, nor the
oracle's."""

from __future__ import annotations

import torch

from properties.cases.case import Case
from properties.harness.runner import prepare, rank_kwargs, run_ranks
from properties.harness.settings import changed
from properties.oracle import answer
from sharded.impls import Impl, load_impl

ARGS = ("hidden", "weight", "bias", "d2t")


def scribbler(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Return what this rank was given, after overwriting all of it; peers run after it, in turn order."""
    given = [t.clone() for t in (hidden, weight, bias, d2t)]
    for t in (hidden, weight, bias, d2t):
        t.fill_(7)
    group.all_reduce(torch.zeros(1))
    return given


def test_an_implementation_writing_into_its_arguments_changes_nothing_else():
    inputs = prepare(Case(batch=3, hidden=8, vocab=50, tp=4, bias=True, d2t="eagle3"), "sim")
    logits = answer(inputs).draft_logits.clone()
    honest = run_ranks(load_impl("packed_key"), inputs)[0][0]
    for _ in range(2):
        given, _ = run_ranks(Impl("scribbler", scribbler), inputs)
        for rank, tensors in enumerate(given):
            pristine = rank_kwargs(inputs, rank)
            assert all(torch.equal(t, pristine[name]) for name, t in zip(ARGS, tensors, strict=True)), rank
    assert torch.equal(answer(inputs).draft_logits, logits)
    assert torch.equal(run_ranks(load_impl("packed_key"), inputs)[0][0], honest)


def test_a_pinned_head_takes_the_backends_tp_before_the_case_checks_itself():
    """A model class fixes its head (1000 ids, padded to 1024): a drawn tp=3 moves to gloo's nearest tp first, so
    the case never meets a tp that cannot split the head it is pinned to."""
    with changed(pinned={"vocab": 1000, "hidden": 8, "padding_size": 64}):
        inputs = prepare(Case(batch=1, hidden=3, vocab=7, tp=3, padding_size=3), "gloo")
    assert (inputs.tp, inputs.case.vocab) == (2, 1000)
