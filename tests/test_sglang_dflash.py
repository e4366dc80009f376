"""SGLang 0.5.23's DFlash draft samplers as argmax subjects (engines/sglang/subjects/dflash_draft.py), run from the
wheel.

They need the sglang wheel alone (``tpargmax install-sglang``): torch runs them, on any group.  Without it these tests
skip with the install command as the reason, and the built-in names refuse with it.  What the suite finds is
asserted as it was measured (docs/conformance/sglang-0.5.23.md), never tuned.
"""

from __future__ import annotations

import pytest

from engines.sglang.subjects import dflash_draft as dflash
from engines.sglang.wheel import kernels as sglang
from properties import test_equivalence as eq
from properties import test_layouts as lay
from properties.argmax import diagnosis
from properties.argmax.checks import check_token_exact
from properties.cases.case import Case
from properties.failures import PropertyFailure
from properties.harness.runner import prepare
from properties.harness.settings import changed, pinned_head
from sharded.impls import load_impl
from tests.suite import failure

REASON = dflash.why_unavailable()
needs_wheel = pytest.mark.skipif(REASON is not None, reason=REASON or "")
GRAPH, EAGER, DOMINO = "sglang_dflash_draft_graph", "sglang_dflash_draft_eager", "sglang_domino_first_ids"


def test_without_the_wheel_the_subjects_name_the_install_command():
    if sglang._installed_version() is None:
        assert REASON == sglang.INSTALL_HINT
        for name in (GRAPH, EAGER, DOMINO):
            with pytest.raises(ValueError, match="install-sglang"):
                load_impl(name)


def test_the_subjects_declare_their_head_and_layouts():
    for fn in (dflash.sglang_dflash_draft_graph, dflash.sglang_dflash_draft_eager):
        assert fn.head["dtype"] == "float32" and fn.head["d2t"] == "none" and fn.head["soft_cap"] is None
        assert fn.layouts == ("diverged",) and "even shards" in fn.layouts_why
    assert dflash.sglang_dflash_draft_graph.head["added"] == 0  # its builder falls back to eager with added ids
    assert "added" not in dflash.sglang_dflash_draft_eager.head
    domino = dflash.sglang_domino_first_ids  # logits go in as the contract computes them: any dtype, any bias
    assert domino.head["added"] == 0 and "dtype" not in domino.head and domino.layouts == ("diverged",)


def _found(name: str, prop) -> str:
    impl = load_impl(name)
    with changed(pinned=pinned_head([impl])):
        return failure(prop, impl)


@needs_wheel
@pytest.mark.parametrize("name", [GRAPH, EAGER])
def test_the_ranks_agree_where_their_copies_of_the_inputs_differ(name):
    """Both reduce the same gathered (max, id) table on every rank, so their ranks agree (the graph sampler where
    each rank holds a base id: its first failure is the one below)."""
    message = _found(name, lay.test_ranks_agree)
    assert message == "" or (name == GRAPH and "max(): Expected reduction dim 1" in message), message


@needs_wheel
@pytest.mark.parametrize("name", [GRAPH, DOMINO])
@pytest.mark.parametrize("case", lay.DIVERGED, ids=range(len(lay.DIVERGED)))
def test_the_table_selects_agree_and_are_exact_on_the_pinned_cases_of_divergence(name, case):
    """Heads where every rank holds base ids: the graph sampler's and Domino's ranks agree, and their tokens are the
    classic path's."""
    impl = load_impl(name)
    with changed(pinned=pinned_head([impl])):
        check_token_exact(impl, prepare(case, "sim"), lay.EXACT_DIVERGED)


@needs_wheel
@pytest.mark.parametrize("name", [GRAPH, DOMINO])
def test_the_table_selects_raise_on_a_rank_without_base_ids(name):
    """``torch.max`` over a shard of no base rows (a vocabulary small beside 64 * tp): IndexError, as measured."""
    message = _found(name, eq.test_token_exact)
    assert "[raised on valid input: IndexError: max(): Expected reduction dim 1 to have non-zero size.]" in message


@needs_wheel
def test_the_eager_sampler_returns_padding_on_an_all_neg_inf_row_beside_a_rank_without_base_ids():
    """A rank without base rows offers the dtype's lowest finite value and its first row, which beats every other
    rank's -inf (found on gloo by exactness under divergence, as measured; the ranks' copies play no part)."""
    case = Case(batch=1, hidden=4, vocab=1, tp=2, bias=True, specials=("neg_inf_rows",))
    impl = load_impl(EAGER)
    with changed(pinned=pinned_head([impl])), pytest.raises(PropertyFailure) as info:
        check_token_exact(impl, prepare(case, "sim"))
    assert str(info.value).startswith("[base padding returned: 32 is a base padding row of rank 1]"), info.value


@needs_wheel
def test_the_eager_sampler_breaks_a_tie_by_rank_where_added_ids_exist():
    """vLLM's docstring head: an added id on rank 0 ties with a smaller base id on rank 1; the lowest rank wins."""
    message = _found(EAGER, eq.test_token_exact)
    assert message.startswith(f"[{diagnosis.TIE_BY_RANK}]"), message
