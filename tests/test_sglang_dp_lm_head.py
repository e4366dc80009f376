"""SGLang 0.5.23's DP-attention LM head gather (engines/sglang/subjects/dp_lm_head.py), run from the wheel.

It needs the sglang wheel alone (``tpargmax install-sglang``); without it these tests skip with the install command
as the reason.  What the suite finds is asserted as it was measured (docs/conformance/sglang-0.5.23.md, S5).
"""

from __future__ import annotations

import pytest

from engines.sglang.subjects import dp_lm_head
from properties.argmax.checks import check_token_exact
from properties.cases.case import Case
from properties.failures import PropertyFailure
from properties.harness.runner import prepare
from properties.harness.settings import changed, pinned_head
from sharded.impls import load_impl

REASON = dp_lm_head.why_unavailable()
needs_wheel = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SUBJECT = "engines.sglang.subjects.dp_lm_head:sglang_dp_lm_head_argmax"
CORRECTED = f"{SUBJECT}_corrected"


def _token_exact(name: str, case: Case) -> None:
    impl = load_impl(name)
    with changed(pinned=pinned_head([impl])):
        check_token_exact(impl, prepare(case, "sim"))


def test_the_subjects_declare_their_head_and_layouts():
    for fn in (dp_lm_head.sglang_dp_lm_head_argmax, dp_lm_head.sglang_dp_lm_head_argmax_corrected):
        assert fn.head["added"] == 0 and fn.head["d2t"] == "none" and fn.layouts == ("diverged",)


@needs_wheel
@pytest.mark.parametrize("tp", [2, 4])
def test_exact_where_the_shards_carry_no_padding(tp):
    """256 base ids: each shard is exactly vocab / tp wide, the case the method is written for."""
    _token_exact(SUBJECT, Case(batch=6, hidden=5, vocab=256, tp=tp, seed=3, ties=("across_ranks",)))


@needs_wheel
@pytest.mark.parametrize("vocab", [250, 255])
def test_a_padded_vocabulary_fails_the_gather(vocab):
    """250 at tp 2 takes the even branch (shards of 128 into a buffer of 125 a rank), 255 the list branch (outputs of
    128 and 127 columns): either gather refuses its tensors, as torch's collectives do."""
    with pytest.raises(PropertyFailure, match=r"raised on valid input: .*RuntimeError: all_gather"):
        _token_exact(SUBJECT, Case(batch=2, hidden=4, vocab=vocab, tp=2, seed=1))
    _token_exact(CORRECTED, Case(batch=2, hidden=4, vocab=vocab, tp=2, seed=1))
