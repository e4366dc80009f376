"""The catalogue of other engines' variants fails exactly where the spec's facts say it should."""

from __future__ import annotations

from properties import test_equivalence as eq
from properties import test_input_errors as errors
from tests.suite import failure

TRTLLM = "sharded.engine_variants:trtllm_style"
SGLANG = "sharded.engine_variants:sglang_style"


def test_trtllm_style_returns_padding_it_never_masks():
    message = failure(eq.test_token_exact, TRTLLM)
    assert message.startswith("[base padding returned: "), message


def test_trtllm_style_rounds_ids_carried_in_float32():
    assert "came back as 16777216 (float-carried id?)" in failure(
        errors.test_ids_beyond_float32_are_exact_or_rejected, TRTLLM
    )


def test_sglang_style_refuses_2_24_ids_and_is_otherwise_exact():
    assert failure(errors.test_ids_beyond_float32_are_exact_or_rejected, SGLANG) == ""
    assert failure(eq.test_token_exact, SGLANG) == ""
