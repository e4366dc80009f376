"""The oracle's logits are the full head's, id for id, on every layout the strategies draw.

The oracle places each shard's rows by the global ids it derives itself (``reference.head``); the
shards come from ``sharded.layout``.  A direct full-head matmul over the rows by global id must give
the same numbers: integer weights in float32 make both exact, compared in float64.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from hypothesis import given

from properties.harness.runner import prepare
from properties.oracle import answer
from properties.strategies import cases, with_edge_cases


@with_edge_cases
@given(case=cases(int_weights=True))
def test_oracle_logits_are_the_full_head_by_global_id(case):
    inputs = prepare(replace(case, dtype="float32", weights="int", specials=()), "sim")
    vocab = inputs.vocab
    bias = None if inputs.bias is None else inputs.bias[:vocab].double()
    want = F.linear(inputs.hidden.double(), inputs.weight[:vocab].double(), bias)
    got = answer(inputs).raw_logits.double()
    if not torch.equal(got, want):
        row, token = (got != want).nonzero()[0].tolist()
        raise AssertionError(
            f"oracle logit of id {token} (row {row}) is {float(got[row, token])}, the full head gives "
            f"{float(want[row, token])}: the oracle misplaced a row of {inputs.case!r}"
        )
