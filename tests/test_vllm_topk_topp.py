"""vLLM's Triton top-k/top-p mask (0.32.0 and 0.33.0) as a sampling subject (engines/vllm/subjects/topk_topp_triton.py).

The subjects need an opt-in environment (vLLM, Triton and NumPy, and CUDA or TRITON_INTERPRET=1); without it the
tests that run vLLM's file skip with ``engines.vllm.wheel.triton_files.why_unavailable()`` as the reason.  The others
run everywhere: the glue alone.
"""

from __future__ import annotations

import math

import pytest
import torch

from engines.vllm.subjects import topk_topp_triton as tt
from engines.vllm.wheel.triton_files import INSTALL_HINT
from reference.sampling import SamplingParams, kept_mask

REASON = tt.why_unavailable()
needs_vllm = pytest.mark.skipif(REASON is not None, reason=REASON or "")
INF = math.inf


def _params(temperature, top_k, top_p) -> SamplingParams:
    n = len(temperature)
    return SamplingParams(
        torch.tensor(temperature, dtype=torch.float32),
        torch.tensor(top_k, dtype=torch.int64),
        torch.tensor(top_p, dtype=torch.float32),
        torch.arange(n, dtype=torch.int64),
    )


def test_subjects_import_and_declare_their_contract_without_vllm():
    """Importable without vLLM (it is loaded lazily); what the properties read: the masks each takes, no declared
    noise (the contract's is drawn), a loader outside the timeout and the reason it cannot run."""
    assert tt.vllm_topk_topp_triton.masks is True and tt.vllm_topk_topp_triton_corrected.masks is True
    assert tt.vllm_topk_topp_triton_split.masks == ("top_p",)
    for fn in (tt.vllm_topk_topp_triton, tt.vllm_topk_topp_triton_corrected, tt.vllm_topk_topp_triton_split):
        assert not hasattr(fn, "noise") and not hasattr(fn, "classic_path")
        assert callable(fn.start) and fn.needs is tt.why_unavailable
    if REASON is not None and tt.vllm_dir() is None:
        assert REASON == INSTALL_HINT


def test_k_and_p_are_built_as_vllm_builds_them():
    """Greedy rows: top-k 0 and top-p 1 (``SamplingParams`` below ``_SAMPLING_EPS``); ``top_k <= 0`` or above the
    vocabulary: the vocabulary (``SamplingStates.add_request``); a mask no row uses: None (``get_top_k_top_p``)."""
    vocab = 10
    k, p, topp_only = tt.vllm_k_p(_params([0.0, 1.0, 1.0, 1.0], [3, 0, 11, 4], [0.5, 0.5, 1.0, 1.0]), vocab)
    assert k.dtype == torch.int32 and k.tolist() == [10, 10, 10, 4]
    assert p.dtype == torch.float32 and p.tolist() == [1.0, 0.5, 1.0, 1.0]
    assert topp_only  # row 1: p < 1 and k at the vocabulary
    k, p, topp_only = tt.vllm_k_p(_params([0.0, 1.0], [3, 10], [0.5, 1.0]), vocab)
    assert k is None and p is None and not topp_only  # the greedy row's masks are off: no row uses one
    k, p, topp_only = tt.vllm_k_p(_params([1.0], [2], [0.5]), vocab)
    assert k.tolist() == [2] and p is not None and not topp_only


def test_the_sentinel_is_a_finite_float32_the_row_does_not_hold():
    x = torch.tensor([[1.0, -INF, math.nan, INF]])
    assert tt._sentinel(x) == -torch.finfo(torch.float32).max
    x = torch.tensor([[-torch.finfo(torch.float32).max, 0.0]])
    got = tt._sentinel(x)
    assert math.isfinite(got) and got > x[0, 0] and not bool((x == got).any())


def test_the_files_other_vllm_imports_are_read_from_it():
    text = "from vllm.platforms import current_platform\nfrom vllm.triton_utils import tl, triton\nimport torch\n"
    assert tt._vllm_imports(text) == ["vllm.platforms"]


@needs_vllm
def test_mask_value_changes_only_what_the_masked_tokens_hold():
    """Glue 3: called with the sentinel, vLLM's mask overwrites exactly the tokens its default call sets to
    ``-inf`` (among those not ``-inf`` already), and leaves every other token as it was."""
    mod = tt._module()
    torch.manual_seed(0)
    x = (torch.randn(6, 300) * 3).round()  # ties, as the properties plant them
    x[1, :250] = -INF
    k = torch.tensor([5, 300, 1, 40, 300, 7], dtype=torch.int32)
    p = torch.tensor([0.9, 0.5, 1.0, 0.3, 0.95, 1.0])
    sentinel = tt._sentinel(x)
    with tt.TRITON_LOCK, tt._typed_range():
        default = mod.apply_top_k_top_p_triton(x.clone(), k, p)
        marked = mod.apply_top_k_top_p_triton(x.clone(), k, p, mask_value=sentinel)
    finite = x != -INF
    assert torch.equal((default == -INF) & finite, (marked == sentinel) & finite)
    assert torch.equal(torch.where(marked == sentinel, -INF, marked), default)


@needs_vllm
def test_top_k_on_distinct_logits_keeps_the_classic_top_k():
    """Where no logit ties, vLLM's top-k keeps the k largest, as the classic top-k; a row with at most k finite
    logits keeps every token (0.33.0 skips its cutoff search there, 0.32.0 finds the same set)."""
    torch.manual_seed(1)
    x = torch.randn(4, 200)
    x[3, 3:] = -INF
    params = _params([1.0] * 4, [1, 17, 150, 5], [1.0] * 4)
    assert torch.equal(tt.vllm_kept(x, params), kept_mask(x, params))
    assert bool(tt.vllm_kept(x, params)[3].all())


@needs_vllm
def test_split_pipeline_takes_more_than_64_rows_64_at_a_time():
    """The split subject sends vLLM's split pipeline at most 64 rows per call; every row is masked."""
    torch.manual_seed(2)
    x = torch.randn(70, 64)
    params = _params([1.0] * 70, [0] * 70, [0.5] * 70)
    kept = tt.vllm_kept(x, params, split=True)
    assert bool(kept.any(dim=1).all()) and not bool(kept.all(dim=1).any())
    assert bool(kept.gather(1, x.argmax(1, keepdim=True)).all())  # the largest always stays


@needs_vllm
def test_t1s_correction_keeps_the_nucleus_the_shipped_branch_drops():
    """T1 (docs/conformance/sampling-vllm-0.33.0.md): top-p 0.9 on [1, 0, 0, 0, 0, 0] (masses 0.352, 0.130 x 5)
    needs all six tokens; the shipped standalone branch keeps the first alone, the corrected one (its bracket from
    0) all six, as the contract does."""
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    params = _params([1.0], [0], [0.9])
    assert tt.vllm_kept(x, params).tolist() == [[True] + [False] * 5]
    assert tt.vllm_kept(x, params, corrected=True).tolist() == kept_mask(x, params).tolist() == [[True] * 6]


@needs_vllm
def test_a_correction_that_does_not_match_the_installed_file_is_refused():
    from engines.vllm.wheel.triton_files import load

    with pytest.raises(RuntimeError, match="the correction expects"):
        load(tt.TOPK_TOPP, (("this line is in no release", "x"),))
