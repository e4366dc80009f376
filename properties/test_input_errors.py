"""Bad input gets a ValueError that names the problem, from every implementation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from groups.devices import rank_device
from properties.argmax.checks import BAD_INPUTS, check_rejects
from properties.harness.runner import backend_tps, prepare, run_per_rank
from properties.harness.settings import current
from properties.strategies import cases
from reference.checks import FLOAT_ID_LIMIT
from sharded.layout import vocab_parallel_layout


@pytest.mark.own_head  # the bad inputs change the head: scale, soft cap, bias, dtype, d2t
@given(case=cases(), bad=st.sampled_from(sorted(BAD_INPUTS)))
def test_rejects_bad_input(impl, backend, case, bad):
    inputs = prepare(case, backend)
    assume(inputs.vocab >= BAD_INPUTS[bad][2])
    check_rejects(impl, inputs, bad)


@pytest.mark.own_head
def test_ids_beyond_float32_are_exact_or_rejected(impl, backend):
    """At 2**24 ids or more, float32-carried ids round: return the exact id or refuse clearly."""
    layouts = vocab_parallel_layout(FLOAT_ID_LIMIT + 3, max(backend_tps(backend)))
    winner = FLOAT_ID_LIMIT + 1  # odd, so float32 cannot hold it
    per_rank = []
    for lay in layouts:
        where = rank_device(current().device, lay.rank)
        weight = torch.zeros(lay.size, 1, device=where)
        if lay.row_of(winner) is not None:
            weight[lay.row_of(winner), 0] = 1.0
        args = {"hidden": torch.ones(1, 1, device=where), "bias": None, "scale": 1.0, "soft_cap": None, "d2t": None}
        per_rank.append({**args, "weight": weight, "layout": lay})
    try:
        results, _ = run_per_rank(impl, backend, per_rank)
    except ValueError as exc:
        assert "2**24" in str(exc), f"{impl}: rejected with an unclear message: {exc}"
        return
    assert int(results[0][0]) == winner, f"{impl}: id {winner} came back as {int(results[0][0])} (float-carried id?)"
