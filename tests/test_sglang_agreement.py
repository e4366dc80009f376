"""SGLang 0.5.23's paths judged for agreement alone: DFlash2's selector walk (engines/sglang/selector.py, the wheel
alone) and EAGLE's greedy verify (engines/sglang/eagle_verify.py, the wheel and Triton: its tree walk is a Triton
kernel, under the interpreter on a CPU).

Without what they need these tests skip with the install command as the reason.  What the suite finds is asserted
as it was measured (docs/conformance/sglang-0.5.23.md, S6 and S8).
"""

from __future__ import annotations

import pytest

from engines.sglang import domino_rollout, eagle_verify, selector
from engines.sglang.selector import JUDGED_WHY
from properties import test_layouts as lay
from properties.argmax.checks import run_checked
from properties.failures import PropertyFailure
from properties.harness.runner import prepare
from properties.harness.settings import changed, pinned_head
from sharded.impls import Impl, load_impl

REASON = selector.why_unavailable()
needs_wheel = pytest.mark.skipif(REASON is not None, reason=REASON or "")
VERIFY_REASON = eagle_verify.why_unavailable()
needs_triton = pytest.mark.skipif(VERIFY_REASON is not None, reason=VERIFY_REASON or "")
VERIFY = "engines.sglang.eagle_verify:sglang_eagle_verify_greedy"
WALK = "engines.sglang.selector:sglang_dflash2_selector_walk"
AGREEING = lay.DIVERGED[:3]  # the pinned cases where the walk's ranks agree; the fourth is where they do not


def _agree(name: str, case) -> None:
    impl = load_impl(name)
    with changed(pinned=pinned_head([impl])):
        run_checked(impl, prepare(case, "sim"), lay.RANKS_AGREE)


def test_the_walk_and_the_verify_are_judged_by_ranks_agree_alone():
    for fn in (selector.sglang_dflash2_selector_walk, selector.sglang_dflash2_selector_walk_corrected):
        assert fn.judged_only == ("test_ranks_agree",) and "no classic path" in fn.judged_why
    for fn in (eagle_verify.sglang_eagle_verify_greedy, eagle_verify.sglang_eagle_verify_greedy_rocm):
        assert fn.judged_only == ("test_ranks_agree",) and "how many drafts" in fn.judged_why
    for fn in (domino_rollout.sglang_domino_second_token, domino_rollout.sglang_domino_second_token_corrected):
        assert fn.judged_only == ("test_ranks_agree",) and "Domino's later tokens" in fn.judged_why
    impl = Impl(WALK, selector.sglang_dflash2_selector_walk)  # what a property asks, without running it
    assert impl.refuses_property("test_ranks_agree") is None
    assert impl.refuses_property("test_token_exact") == f"{WALK} is judged by test_ranks_agree alone: {JUDGED_WHY}"
    assert Impl("vllm_pairs", load_impl("vllm_pairs").fn).refuses_property("test_token_exact") is None


@needs_wheel
def test_ranks_propose_different_tokens_where_their_copies_decide_a_tie():
    with pytest.raises(PropertyFailure) as info:
        _agree(WALK, lay.DIVERGED[3])
    message = str(info.value)
    assert message.startswith("[ranks disagree on the output]"), message
    assert "rank 0 returned [2], rank 1 returned [319]" in message, message


@needs_wheel
@pytest.mark.parametrize("case", AGREEING, ids=range(len(AGREEING)))
def test_elsewhere_the_ranks_agree(case):
    _agree(WALK, case)


@needs_wheel
@pytest.mark.parametrize("case", lay.DIVERGED, ids=range(len(lay.DIVERGED)))
def test_rank_zeros_proposals_broadcast_agree(case):
    _agree(f"{WALK}_corrected", case)


@needs_triton
def test_on_cuda_the_verify_accepts_different_counts_where_the_ranks_drafts_differ():
    """Drafts picked on each rank from its own copy differ on rows 0 and 7; the CUDA branch broadcasts nothing."""
    with pytest.raises(PropertyFailure) as info:
        _agree(VERIFY, lay.DIVERGED[3])
    message = str(info.value)
    assert message.startswith("[ranks disagree on the output]"), message
    assert "rows [0, 7] (2 of 8): rank 0 returned [0, 1], rank 1 returned [1, 0]" in message, message


@needs_triton
@pytest.mark.parametrize("case", lay.DIVERGED, ids=range(len(lay.DIVERGED)))
def test_on_rocm_the_broadcast_makes_the_ranks_agree(case):
    _agree(f"{VERIFY}_rocm", case)


SECOND = "engines.sglang.domino_rollout:sglang_domino_second_token"


@needs_wheel
def test_dominos_second_token_differs_where_the_ranks_copies_decide_a_tie():
    with pytest.raises(PropertyFailure) as info:
        _agree(SECOND, lay.DIVERGED[0])
    message = str(info.value)
    assert message.startswith("[ranks disagree on the output]"), message
    assert "rank 0 returned [76], rank 3 returned [896]" in message, message


@needs_wheel
@pytest.mark.parametrize("case", lay.DIVERGED, ids=range(len(lay.DIVERGED)))
def test_dominos_proposals_broadcast_agree(case):
    _agree(f"{SECOND}_corrected", case)
