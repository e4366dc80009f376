"""vLLM 0.33.0's XPress argmax kernels as argmax subjects (engines/vllm/subjects/xpress_argmax.py).

The first tests need nothing installed: what the subjects say where vLLM 0.33.0, Triton or a device is missing.
The rest need vLLM 0.33.0's environment (``tpargmax install-vllm --version 0.33.0``: its wheel, Triton, NumPy) and
CUDA or ``TRITON_INTERPRET=1``; without it they skip with the subjects' own reason.  Under the interpreter the cases
hold no NaN: there ``tl.max``/``tl.argmax`` are NumPy's ``nanmax``/``nanargmax``, which says nothing of a GPU.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engines.vllm.subjects import xpress_argmax as xpress
from sharded.impls import Impl, runnable
from tests.suite import run

PROJECT = Path(__file__).resolve().parent.parent
REASON = xpress.why_unavailable()
needs_kernels = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SUBJECTS = {
    name: getattr(xpress, name)
    for name in (
        "vllm_xpress_argmax",
        "vllm_xpress_argmax_chunk64",
        "vllm_xpress_candidate_argmax",
        "vllm_xpress_candidate_argmax_corrected",
    )
}
# Cases without NaN: ties across and within shards, on a shard boundary, a whole row tied, signed zeros, all -inf
# rows, added ids tied with base ids, a logits vocabulary below the head's ids, vocabularies of one to three of
# vLLM's 4096-wide chunks, tp 1 to 8, each dtype.
CASES = [
    dict(batch=4, hidden=4, vocab=7, tp=2, bias=True, specials=("all_negative",)),
    dict(batch=4, hidden=4, vocab=7, tp=8, padding="above_max"),
    dict(batch=8, hidden=6, vocab=1000, tp=4, ties=("across_ranks",), seed=1),
    dict(batch=8, hidden=6, vocab=1000, tp=4, ties=("within_shard",), seed=2),
    dict(batch=8, hidden=6, vocab=200, tp=2, ties=("shard_boundary",), padding="copy_max", seed=3),
    dict(batch=4, hidden=5, vocab=300, tp=4, ties=("whole_row",), dtype="bfloat16"),
    dict(batch=4, hidden=5, vocab=500, tp=4, bias=True, scale=0.5, specials=("signed_zero",), seed=5),
    dict(batch=4, hidden=5, vocab=90, tp=2, bias=True, specials=("neg_inf_rows",), d2t="zeros", target_extra=10),
    dict(batch=4, hidden=5, vocab=300, tp=2, bias=True, specials=("subnormal", "huge"), dtype="float16", seed=6),
    dict(batch=4, hidden=5, vocab=1010, tp=2, added=16, ties=("added_tie",), seed=9),
    dict(batch=4, hidden=5, vocab=1000, tp=4, added=40, padding_size=128, logits_vocab=990, padding="above_max"),
    dict(batch=3, hidden=4, vocab=9000, tp=1, weights="normal", seed=6),  # 3 chunks of 4096
    dict(batch=2, hidden=4, vocab=12000, tp=4, ties=("across_ranks",), dtype="bfloat16", seed=7),
]
# Cases whose rows have one maximum: the candidate path's pick does not depend on the order of its candidates.
NO_TIES = [CASES[0], CASES[1], CASES[8], CASES[11]]


def _inputs(fields: dict, backend: str = "sim"):
    from properties.cases.case import Case
    from properties.cases.tensors import build

    return replace(build(Case(**fields)), backend=backend)


def _impl(name: str) -> Impl:
    return Impl(f"engines.vllm.subjects.xpress_argmax:{name}", SUBJECTS[name])


def _matches_the_oracle(name: str, fields: dict) -> None:
    """The subject's token is the contract's on the case, and its output keeps the contract's shape."""
    from properties.argmax.checks import check_output_contract, check_token_exact

    inputs = _inputs(fields)
    check_token_exact(_impl(name), inputs)
    check_output_contract(_impl(name), inputs)


# --- without anything installed ------------------------------------------------------------------------------------


def test_the_module_imports_without_vllm_or_triton():
    code = "import sys, engines.vllm.subjects.xpress_argmax; print(sorted({'vllm', 'triton'} & set(sys.modules)))"
    out = run([sys.executable, "-c", code])  # forked from a process that imported torch (neither, as a fresh one)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_the_subjects_say_what_they_need_and_run_on_any_group(name):
    fn = SUBJECTS[name]
    assert fn.needs is xpress.why_unavailable and fn.start is not None
    impl = _impl(name)
    assert not impl.process_bound and not impl.head and not impl.classic
    assert "vllm" in impl.packages and "triton" in impl.packages


def test_a_release_before_0_33_0_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(xpress, "installed_vllm", lambda: "0.32.0")
    reason = xpress.why_unavailable()
    assert reason is not None and "\n" not in reason
    assert reason.startswith("vLLM 0.32.0 is installed") and "ships from vLLM 0.33.0 on" in reason
    assert "install-vllm --version 0.33.0" in reason
    with pytest.raises(ValueError, match="ships from vLLM 0.33.0 on"):
        runnable(_impl("vllm_xpress_argmax"))
    with pytest.raises(RuntimeError, match="ships from vLLM 0.33.0 on"):
        xpress.kernels.__wrapped__()  # not the cached module: the check runs again


def test_without_vllm_the_reason_is_the_install_command(monkeypatch):
    monkeypatch.setattr(xpress, "installed_vllm", lambda: None)
    reason = xpress.why_unavailable()
    assert reason is not None and "\n" not in reason
    assert "vLLM 0.33.0 or later" in reason and "install-vllm --version 0.33.0" in reason


def test_a_release_the_suite_does_not_know_is_named(monkeypatch):
    monkeypatch.setattr(xpress, "installed_vllm", lambda: "0.99.0")
    monkeypatch.setattr(xpress.triton_files, "vllm_dir", lambda: PROJECT)
    reason = xpress.why_unavailable()
    assert reason is not None and reason.startswith("vLLM 0.99.0 is installed, the releases under test are")


def test_a_wheel_without_the_file_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(xpress, "installed_vllm", lambda: "0.33.0")
    monkeypatch.setattr(xpress.triton_files, "vllm_dir", lambda: tmp_path)
    assert xpress.why_unavailable() == (
        f"vLLM 0.33.0's wheel has no {xpress.XPRESS} (vLLM's XPress argmax kernels ship from vLLM 0.33.0 on)"
    )


def test_without_triton_or_a_device_the_reason_is_tritons(monkeypatch, tmp_path):
    (tmp_path / xpress.XPRESS).parent.mkdir(parents=True)
    (tmp_path / xpress.XPRESS).write_text("")
    monkeypatch.setattr(xpress, "installed_vllm", lambda: "0.33.0")
    monkeypatch.setattr(xpress.triton_files, "vllm_dir", lambda: tmp_path)
    monkeypatch.setattr(xpress.triton_env, "triton_imports", lambda: False)
    reason = xpress.why_unavailable()
    assert reason is not None and reason.startswith("Triton is not installed: vLLM's XPress argmax kernels")
    monkeypatch.setattr(xpress.triton_env, "triton_imports", lambda: True)
    monkeypatch.setattr(xpress.triton_env, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "TRITON_INTERPRET=1" in (xpress.why_unavailable() or "")


# --- with vLLM 0.33.0, Triton, and a GPU or the interpreter -----------------------------------------------------


@needs_kernels
def test_the_kernels_are_the_wheels_file():
    module = xpress.kernels()
    path = Path(module.__file__).resolve()
    assert path == (xpress.triton_files.vllm_dir() / xpress.XPRESS).resolve()
    assert not path.is_relative_to(PROJECT / "engines") and not module.__name__.startswith("vllm")
    topk = xpress._vllm_topk()
    assert topk.__code__.co_filename.endswith(xpress.LOGITS_PROCESSOR)


@needs_kernels
@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_the_subjects_call_vllms_kernels(name, monkeypatch):
    module = xpress.kernels()
    attr = "fused_topc_argmax_to_blk" if "candidate" in name else "fused_add_argmax_to_blk"
    real, calls = getattr(module, attr), []
    monkeypatch.setattr(module, attr, lambda *a, **kw: calls.append((a, kw)) or real(*a, **kw))
    from properties.harness.runner import run_ranks

    inputs = _inputs(CASES[2])
    run_ranks(_impl(name), inputs)
    assert len(calls) == inputs.tp  # once per rank, on the gathered row
    if attr == "fused_add_argmax_to_blk":
        assert {kw["block_v"] for _, kw in calls} == {64 if name.endswith("chunk64") else 4096}


@needs_kernels
@pytest.mark.parametrize("fields", CASES, ids=lambda f: f"v{f['vocab']}-tp{f['tp']}-{f.get('dtype', 'float32')}")
@pytest.mark.parametrize("name", ["vllm_xpress_argmax", "vllm_xpress_argmax_chunk64"])
def test_the_full_vocabulary_pick_matches_the_oracle(name, fields):
    _matches_the_oracle(name, fields)


@needs_kernels
@pytest.mark.parametrize("fields", NO_TIES, ids=lambda f: f"v{f['vocab']}-tp{f['tp']}")
def test_the_candidate_pick_matches_the_oracle_without_ties(fields):
    _matches_the_oracle("vllm_xpress_candidate_argmax", fields)


@needs_kernels
def test_the_candidate_pick_breaks_ties_in_the_top_ks_order():
    """The finding, pinned: ``fused_topc_argmax_to_blk`` takes the first maximum in the order ``_topk`` returned
    the candidates (``torch.topk``'s off a GPU), not the smallest id: a row whose every logit ties gives the top-k's
    first candidate, where the contract (and the full-vocabulary kernels) give id 0."""
    row = torch.zeros(2, 300)
    want = torch.topk(row, min(xpress.TOPC, 300)).indices[:, 0]
    assert torch.equal(xpress.candidate_top(row), want)
    assert xpress.full_vocab_top(row).tolist() == [0, 0]
    if want.tolist() != [0, 0]:  # torch.topk's order here; the test above holds either way
        assert xpress.candidate_top(row).tolist() != [0, 0]


def test_the_correction_keeps_the_smallest_ids_of_a_tie_in_id_order():
    """V15's correction: the top k with ties at the boundary kept by the smallest id, in ascending id order (plain
    torch: no vLLM needed)."""
    scores = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 3.0], [float("-inf")] * 6])
    values, ids = xpress.topk_by_id(scores, 3)
    assert ids.tolist() == [[1, 2, 4], [0, 1, 2]]
    assert values.tolist() == [[3.0, 3.0, 3.0], [float("-inf")] * 3]


@needs_kernels
@pytest.mark.parametrize("fields", CASES, ids=lambda f: f"v{f['vocab']}-tp{f['tp']}-{f.get('dtype', 'float32')}")
def test_the_corrected_candidate_pick_matches_the_oracle(fields):
    """With its candidates in id order the same kernel gives the contract's token on every case, ties included."""
    _matches_the_oracle("vllm_xpress_candidate_argmax_corrected", fields)


@needs_kernels
def test_runs_in_gloo_rank_processes():
    if torch.cuda.is_available():
        pytest.skip("gloo cannot all-gather CUDA tensors")
    from properties.argmax.checks import check_token_exact

    check_token_exact(_impl("vllm_xpress_argmax"), _inputs(CASES[4], backend="gloo"))
