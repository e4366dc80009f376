"""d2t safety: the static classification and the dynamic counterexample agree.

A strictly increasing table never lets a tie split the two paths; every
non-monotone table does, at an inverted pair. Each finding is recorded as a
flagged result (shown in the run's summary), not raised as a crash.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties.argmax.d2t_tables import (
    check_tie,
    find_counterexample,
    increasing_tables,
    non_monotone_tables,
    targets_of,
    tie_pairs,
)
from properties.harness.runner import backend_tps
from reference.d2t import IDENTITY, INCREASING, NON_MONOTONE, analyse_d2t

FINDING = "d2t finding"


@given(table=increasing_tables())
def test_increasing_tables_are_classified_safe(table):
    d2t, target_vocab = table
    report = analyse_d2t(d2t, target_vocab)
    assert report.kind == (IDENTITY if bool((d2t == 0).all()) else INCREASING), report.evidence()
    assert report.safe and report.inversions == 0


def record_finding(node, finding) -> None:
    """Keep the first finding of a test for the run's summary (conftest prints it)."""
    if not any(name == FINDING for name, _ in node.user_properties):
        node.user_properties.append((FINDING, str(finding)))


def _flag_fires(impl, backend, request, data, monotone, k=None) -> None:
    """A tie at the maximum splits ``impl`` from the classic path exactly on a non-monotone table: the argmax
    (``k`` None) or the order of a top-k, whose oracle ranks ties by target id as the classic scatter does."""
    d2t, target_vocab = data.draw(increasing_tables() if monotone else non_monotone_tables(), label="table")
    report = analyse_d2t(d2t, target_vocab)
    assert report.kind == (NON_MONOTONE if not monotone else report.kind) and report.safe == monotone
    i, j = data.draw(tie_pairs(d2t), label="tie")
    where = {"backend": backend, "tp": backend_tps(backend)[0], "k": None if k is None else min(k, d2t.numel())}
    finding = check_tie(impl, d2t, target_vocab, i, j, **where)
    targets = targets_of(d2t)
    assert finding is None or not monotone, (
        f"an increasing table, tie at ({i}, {j}): the local path and the classic path differ: {finding}"
    )
    assert finding is not None or monotone, (
        f"a non-monotone table, tie at ({i}, {j}): a local path returns {int(targets[i])} = {i} + d2t[{i}] first, "
        f"as a local argmax does, and the classic path {int(targets[j])}; {impl} returned the classic path's order, "
        f"so the flag cannot fire (static analysis: {report.evidence()})"
    )
    if finding is not None:
        record_finding(request.node, finding)
        assert (finding.local_token, finding.classic_token) == (int(targets[i]), int(targets[j]))
        si, sj, ti, tj = report.first_inversion  # static and dynamic agree on the first inverted pair too
        static = check_tie(impl, d2t, target_vocab, si, sj, **where)
        assert static is not None and (static.local_token, static.classic_token) == (ti, tj)


@pytest.mark.own_head
@pytest.mark.local_path
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # request is only read, never reset
@given(data=st.data(), monotone=st.booleans())
def test_the_flag_fires_exactly_on_non_monotone_tables(impl, backend, request, data, monotone):
    _flag_fires(impl, backend, request, data, monotone)


@pytest.mark.own_head
@pytest.mark.local_path
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), monotone=st.booleans(), k=st.integers(2, 8))
def test_the_top_k_flag_fires_exactly_on_non_monotone_tables(topk_impl, backend, request, data, monotone, k):
    _flag_fires(topk_impl, backend, request, data, monotone, k)


def _single_inversion(vocab: int, i: int, j: int) -> tuple[torch.Tensor, int]:
    targets = torch.arange(vocab, device="cpu") * 2  # an increasing table with gaps, into twice the targets
    targets[[i, j]] = targets[[j, i]]
    return targets - torch.arange(vocab, device="cpu"), 2 * vocab


@pytest.mark.own_head
@pytest.mark.local_path
def test_a_single_inversion_among_32000_ids_is_found_and_shrunk(impl, backend, request):
    budget = settings(settings.get_profile("ci"), max_examples=settings.default.max_examples, database=None)
    for i, j in ((17_345, 17_346), (4_000, 29_000)):
        d2t, target_vocab = _single_inversion(32_000, i, j)
        report = analyse_d2t(d2t, target_vocab)
        assert report.first_inversion[:2] == (i, j), report.evidence()
        finding = find_counterexample(impl, d2t, target_vocab, budget, backend=backend, tp=backend_tps(backend)[0])
        assert finding is not None and (finding.i, finding.j) == (i, j), f"shrunk to {finding}, not to ({i}, {j})"
        record_finding(request.node, finding)
