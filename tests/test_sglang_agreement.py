"""SGLang 0.5.23's paths judged for agreement alone: DFlash2's selector walk (engines/sglang/subjects/selector.py, the
wheel alone) and EAGLE's greedy verify (engines/sglang/subjects/eagle_verify.py, the wheel and Triton: its tree walk is
a Triton kernel, under the interpreter on a CPU).

Without what they need these tests skip with the install command as the reason.  What the suite finds is asserted
as it was measured (docs/conformance/sglang-0.5.23.md, S6 and S8).
"""

from __future__ import annotations

import pytest

from engines.sglang.subjects import domino_rollout, eagle_verify, selector
from engines.sglang.subjects.selector import JUDGED_WHY
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
VERIFY = "engines.sglang.subjects.eagle_verify:sglang_eagle_verify_greedy"
WALK = "engines.sglang.subjects.selector:sglang_dflash2_selector_walk"
SECOND = "engines.sglang.subjects.domino_rollout:sglang_domino_second_token"


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


# (subject, a pinned case of divergence, how its ranks disagree there): DFlash2's first proposal, Domino's second
DISAGREE = (
    (WALK, 3, "rank 0 returned [2], rank 1 returned [319]"),
    (SECOND, 0, "rank 0 returned [76], rank 3 returned [896]"),
    (VERIFY, 3, "rows [0, 7] (2 of 8): rank 0 returned [0, 1], rank 1 returned [1, 0]"),
)
AGREE = [(f"{WALK}_corrected", n) for n in range(4)] + [(f"{SECOND}_corrected", n) for n in range(4)]
AGREE += [(WALK, n) for n in range(3)] + [(f"{VERIFY}_rocm", n) for n in range(4)]


def _needs(name: str):
    """The wheel alone, or Triton too for the verify (its tree walk is a Triton kernel)."""
    return needs_triton if name.startswith(VERIFY) else needs_wheel


@pytest.mark.parametrize(("name", "case", "shown"), [pytest.param(*row, marks=_needs(row[0])) for row in DISAGREE])
def test_ranks_disagree_where_their_copies_decide(name, case, shown):
    """A pick each rank takes from its own copy, no broadcast after: the selector's walk and Domino's later tokens
    propose different tokens, the verify over such drafts (CUDA's branch) accepts different counts."""
    with pytest.raises(PropertyFailure) as info:
        _agree(name, lay.DIVERGED[case])
    message = str(info.value)
    assert message.startswith("[ranks disagree on the output]") and shown in message, message


@pytest.mark.parametrize(("name", "case"), [pytest.param(*row, marks=_needs(row[0])) for row in AGREE])
def test_the_ranks_agree_where_rank_zeros_result_is_broadcast_or_no_tie_is_decided(name, case):
    _agree(name, lay.DIVERGED[case])
