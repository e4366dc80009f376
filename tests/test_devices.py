"""``--device``, tested as far as a CPU can test it.

On a GPU a tensor made without naming a device lands on the CPU and meets the
rank's CUDA tensors, which torch refuses.  Here every such tensor lands on
``meta`` instead (``torch.device`` as a context, in the driver's thread and in
each rank's), where it has no values: a property that let one reach a token, a
comparison or a message would fail.  So the properties run clean only if
``reference/``, ``sharded/`` and ``properties/`` name the device of every
tensor they make.  The rest: the usage errors, and the device a repro file records.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
from hypothesis import settings

import conftest
from groups.devices import DEVICE_ENV, default_device
from properties import test_d2t as d2t
from properties import test_divergence as divergence
from properties import test_equivalence as eq
from properties import test_head_layouts as layouts
from properties import test_input_errors as errors
from properties import test_top_k as top_k
from properties.argmax.checks import TOKEN_EXACT
from properties.cases.case import Case
from properties.harness import runner
from properties.harness.settings import changed, current
from properties.replay import main as replay_main
from properties.repro import records as repro
from sharded.impls import Impl, load_impl
from sharded.local_argmax import packed_key
from tests.suite import FIND_ONLY, broken_spec, failure
from tests.test_options import Options
from tpargmax.cli import main as tpargmax

IMPLIED = torch.device("meta")  # where a tensor made without a device goes, while these tests run
BUDGET = settings(FIND_ONLY, max_examples=40)
# The simulated ranks' collective timeout, generous: the suite's 10 s ran out once on a loaded 2-core machine (vLLM's
# engines beside the run), and a failure these tests expect came back as a hang
SLOW_MACHINE_TIMEOUT = 300.0


@pytest.fixture(autouse=True)
def _generous_collective_timeout():
    with changed(collective_timeout=SLOW_MACHINE_TIMEOUT):
        yield


def implied_meta(impl: Impl) -> Impl:
    """``impl`` with every rank's tensors made without a device put on ``meta`` (rank threads have their own)."""

    @functools.wraps(impl.fn)  # keeps path, head and the other attributes the suite reads
    def on_rank(**kwargs):
        with IMPLIED:
            return impl.fn(**kwargs)

    return Impl(impl.spec, on_rank)


def test_the_trap_catches_a_tensor_made_without_a_device():
    """A right answer, plus a tensor made without a device: on a GPU, a CPU tensor meeting a CUDA one."""

    def implied_zero(**kwargs):
        return packed_key(**kwargs) + torch.zeros(1, dtype=torch.int64)  # no device: the bug

    with IMPLIED:
        message = failure(eq.test_token_exact, implied_meta(Impl("implied_zero", implied_zero)), BUDGET)
    assert "raised on valid input" in message and "meta" in message, message


PROPERTIES = [
    eq.test_token_exact,
    eq.test_output_contract,
    eq.test_tp_invariance,
    eq.test_row_independence,
    eq.test_determinism,
    errors.test_rejects_bad_input,
    divergence.test_all_neg_inf_row_with_offset_d2t,
    d2t.test_the_flag_fires_exactly_on_non_monotone_tables,
    layouts.test_oracle_logits_are_the_full_head_by_global_id,
]
# every property's own code on one implementation; every built-in's code through the two that judge its tokens
PAIRS = [(prop, "packed_key") for prop in PROPERTIES] + [
    (prop, name)
    for name in ("vllm_pairs", "classic_gather", "sglang_style")
    for prop in (eq.test_token_exact, eq.test_output_contract)
]


@pytest.mark.parametrize("prop, name", PAIRS, ids=[f"{name}-{prop.__name__}" for prop, name in PAIRS])
def test_no_tensor_is_made_on_an_implied_device(prop, name):
    with IMPLIED:
        message = failure(prop, implied_meta(load_impl(name)), BUDGET)
    assert not message, message


@pytest.mark.parametrize(
    "prop", [top_k.test_top_k_exact, top_k.test_top_k_contract, top_k.test_top1_is_the_argmax_token]
)
def test_no_tensor_is_made_on_an_implied_device_in_top_k(prop):
    with IMPLIED:
        message = failure(prop, implied_meta(load_impl("topk_pairs")), BUDGET)
    assert not message, message


@pytest.mark.parametrize(
    "prop, name, words",
    [
        (eq.test_token_exact, "lowest_rank_wins", "[tie across ranks resolved by rank, not by id"),
        (eq.test_token_exact, "nan_ignored", "[NaN not treated as the maximum"),
        (eq.test_token_exact, "added_padding_unmasked", "[added padding returned: "),
        (eq.test_token_exact, "d2t_skipped", "[d2t mapping skipped"),
        (eq.test_token_exact, "ids_in_bf16", "id carried in bfloat16"),
        (eq.test_token_exact, "softcap_after_choosing", "[soft cap not applied before choosing"),
        (eq.test_token_exact, "key_without_zero_canon", "[signed zero"),
        (eq.test_token_exact, "cap_base_rows_only", "[cap or scale not applied to the added rows"),
        (eq.test_token_exact, "rows_shifted_by_padding", "[another row's token: "),
        (eq.test_token_exact, "fused_fp32_epilogue", "[logits not rounded to the head's dtype"),
        (top_k.test_top_k_exact, "topk_merge_by_rank", "[top-k tie order: equal logits must come in ascending id]"),
    ],
)
def test_a_diagnosis_makes_no_tensor_on_an_implied_device(prop, name, words):
    """A wrong token is explained from the oracle's logits: that code runs on the device too."""
    with IMPLIED:
        message = failure(prop, implied_meta(load_impl(broken_spec(name))), FIND_ONLY)
    assert words in message, message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_a_usage_error_in_one_line(monkeypatch, capsys, kept_settings):
    monkeypatch.setenv(DEVICE_ENV, "cuda")  # the option's default, as conftest reads it
    with pytest.raises(pytest.UsageError) as info:
        conftest.pytest_configure(Options(device=default_device()))
    assert str(info.value).startswith("--device cuda: no CUDA device here") and "\n" not in str(info.value)
    assert replay_main(["--device", "cuda", "Case(batch=1, hidden=3, vocab=5, tp=1)"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device cuda: no CUDA device here" in err, err


def test_an_unknown_device_is_a_usage_error(monkeypatch, kept_settings):
    with pytest.raises(pytest.UsageError, match=r"--device: choose cpu or cuda, got 'tpu'"):
        conftest.pytest_configure(Options(device="tpu"))


def test_gloo_with_cuda_tensors_is_a_usage_error_and_sim_the_default(monkeypatch, kept_settings):
    """gloo all-gathers CPU tensors only; on CUDA the default backend is the simulated group."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(pytest.UsageError, match="gloo cannot all-gather CUDA tensors; use --backend sim"):
        conftest.pytest_configure(Options(device="cuda", backend="gloo"))
    conftest.pytest_configure(Options(device="cuda", backend=None))
    assert current().backends == ("sim",) and current().device == "cuda"


def _written(tmp_path) -> tuple[dict, object]:
    inputs = runner.prepare(Case(batch=2, hidden=4, vocab=130, tp=2, bias=True, d2t="eagle3", target_extra=9))
    failure_record = {"inputs": inputs, "property": TOKEN_EXACT, "rule": "r", "impl": "vllm_pairs", "extra": {}}
    path = repro.write(tmp_path, failure_record)
    return json.loads(path.read_text()), path


def test_a_repro_file_records_the_device_and_replays_on_another(tmp_path, capsys, monkeypatch):
    with IMPLIED:
        record, path = _written(tmp_path)
        assert record["device"] == "cpu"
        _, inputs = repro.load(path)
    assert inputs.device == "cpu" and inputs.hidden.device.type == "cpu"
    record["device"] = "cuda"  # a find from a GPU machine
    path.write_text(json.dumps(record))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda: no CUDA device here") as info:
            repro.load(path)
        assert not isinstance(info.value, repro.DamagedRepro)
        assert tpargmax(["repro", str(path)]) == 2 and "no CUDA device here" in capsys.readouterr().err
    assert tpargmax(["repro", "--device", "cpu", str(path)]) == 0
    assert "on sim (cpu)" in capsys.readouterr().out
    record["device"] = "tpu"
    path.write_text(json.dumps(record))
    with pytest.raises(repro.DamagedRepro, match="'device' must be one of"):
        repro.load(path)
