"""The catalogue of other engines' variants fails exactly where the spec's facts say it should."""

from __future__ import annotations

import pytest
import torch

from engines.variants import sglang_style
from properties import test_equivalence as eq
from properties import test_input_errors as errors
from reference.checks import FLOAT_ID_LIMIT
from sharded.layout import vocab_parallel_layout
from tests.suite import failure

TRTLLM = "engines.variants:trtllm_style"
SGLANG = "engines.variants:sglang_style"


def test_trtllm_style_returns_padding_it_never_masks():
    message = failure(eq.test_token_exact, TRTLLM)
    assert message.startswith("[base padding returned: "), message


def test_trtllm_style_rounds_ids_carried_in_float32():
    assert "came back as 16777216 (float-carried id?)" in failure(
        errors.test_ids_beyond_float32_are_exact_or_rejected, TRTLLM
    )


def test_sglang_style_refuses_2_24_ids():
    """Its packed key holds 24-bit ids; that it is otherwise exact is the conformance page's row."""
    assert failure(errors.test_ids_beyond_float32_are_exact_or_rejected, SGLANG) == ""
    layout = vocab_parallel_layout(FLOAT_ID_LIMIT, 2)[0]
    with pytest.raises(ValueError, match=r"below 2\*\*24"):  # refused before any collective
        sglang_style(torch.ones(1, 1), torch.zeros(layout.size, 1), None, layout, group=None)
