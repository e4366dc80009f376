"""vLLM 0.33.0 beside 0.32.0: what the suite knows of it that 0.32.0's findings do not say.

0.33.0 has only its CUDA wheel, run on a CPU without its kernels (``tpargmax install-vllm --version 0.33.0``).  Its
page, ``docs/conformance/vllm-0.33.0.md``, claims its failures with 0.32.0's causes where the same defect fails (the
code they quote is unchanged: the report relocates each quote in the installed wheel and says where it moved), with
the causes this release adds, and with 0.32.0's reasons.  The new classes are subjects of their families
(``Subject.since``); nothing of 0.32.0's adapters is copied here.
"""

from __future__ import annotations

from dataclasses import replace

from engines.findings import Cause, EndToEnd, Findings, Reason
from engines.versions import vllm_page
from engines.vllm.causes import findings as previous

RELEASE = "0.33.0"
PAGE = vllm_page(RELEASE)
NO_ENGINE = (
    "vLLM 0.33.0 has only its CUDA wheel, whose CPU attention is one of the kernels it lacks: its engine cannot run "
    "on a CPU, so end to end is judged on 0.32.0 ([its page](vllm-0.32.0.md#end-to-end))"
)
# reach that 0.33.0's new classes add to a cause of 0.32.0, read in the wheel
REACHES = {
    "V5": "DFlash2BeamForCausalLM's `compute_candidates` too (`vllm/models/beam/nvidia/dflash2.py:615`)",
    "V6": "DFlash2BeamForCausalLM's `compute_candidates` too (`vllm/models/beam/nvidia/dflash2.py:615`)",
    "V8": (
        "DFlash2BeamForCausalLM, whose processor always has a soft cap: `LogitsProcessor(vocab_size, soft_cap="
        "float(draft_config['final_logit_softcapping']))` (`vllm/models/beam/nvidia/dflash2.py:564-567`), and whose "
        "`compute_candidates` calls `get_top_k_tokens` (`:615`)"
    ),
}


_M = "engines_vllm_models"
# This page's failures by what claims them: (direct, then each consequence's in the cause's order).  A model class's
# failure was recorded under its new module name (sharded_vllm_models before), so few keys are 0.32.0's own; each was
# read and claimed by its rule, its case and the cause's mechanism.
FAILURES: dict[str, tuple[tuple[str, ...], ...]] = {
    "V1": (
        (
            "test_token_exact-vllm-gloo-1983286560",
            "test_top_k_contract-vllm_topk-gloo-177eb5faf2",
            "test_top_k_contract-vllm_topk_logprobs-gloo-2949a6051c",
        ),
        (
            "test_top_k_determinism-vllm_topk-gloo-4c9354b591",
            "test_top_k_determinism-vllm_topk_logprobs-gloo-816b9e46fe",
        ),
    ),
    "V2": (("test_token_exact-vllm_classic-gloo-21ccbf4391",),),
    "V3": (
        (
            f"test_token_exact-{_M}_InklingMTP_get_top_tokens-gloo-78e50d3287",
            f"test_output_contract-{_M}_InklingMTP_get_top_tokens-gloo-6d3524e96a",
            f"test_token_exact-{_M}_InklingMTP_amd__get_top_tokens-gloo-ca1c208a28",
            f"test_output_contract-{_M}_InklingMTP_amd__get_top_tokens-gloo-9e325db32a",
        ),
        # k=1 over a logits vocabulary of 1: the head id 1 past it comes back and indexes d2t
        ("test_top1_is_the_argmax_token-vllm_topk_logprobs-gloo-0c5083e325",),
    ),
    "V4": (("vllm test_ids_beyond_float32_are_exact_or_rejected",),),
    "V5": (
        (
            "test_top_k_exact-vllm_topk-gloo-9f8e8a4653",
            "test_top_k_exact-vllm_topk_logprobs-gloo-286c0882e7",
            f"test_top_k_exact-{_M}_DFlash2BeamForCausalLM_get_top_k_tokens-gloo-f2ebd69ed1",
            f"test_top_k_exact-{_M}_LiLiCorrForCausalLM_get_top_k_tokens-gloo-546f71fd8d",
        ),
        (  # +0.0 and -0.0, two +inf logits, a whole row of equal logits: the top-1 of a tie
            "test_top1_is_the_argmax_token-vllm_topk-gloo-64775a2385",
            "test_top1_is_the_argmax_token-vllm_topk_logprobs-gloo-9a810a4b78",
            f"test_top1_is_the_argmax_token-{_M}_DFlash2Qwen3ForCausalLM_get_top_k_tokens-gloo-94d5b3c73b",
            f"test_top1_is_the_argmax_token-{_M}_DFlash2BeamForCausalLM_get_top_k_tokens-gloo-91200a49e2",
            f"test_top1_is_the_argmax_token-{_M}_LiLiCorrForCausalLM_get_top_k_tokens-gloo-ca0e71896a",
        ),
    ),
    "V6": (
        (),
        (
            "test_top_k_exact-vllm_topk-gloo-155c488c0b",
            "test_top_k_contract-vllm_topk-gloo-9267bb734d",
            "test_top_k_exact-vllm_topk_logprobs-gloo-99c8a597a2",
            "test_top_k_contract-vllm_topk_logprobs-gloo-5891d1efe9",
        ),
    ),
    "V7": ((f"test_top_k_exact-{_M}_DFlash2Qwen3ForCausalLM_get_top_k_tokens-gloo-d6f09d5982",),),
    "V8": ((),),  # the model rows' rerun under the layouts drew whole-row ties (V5) where it drew capped ones
    "V9": (
        (
            "vllm_topk test_top_k_rejects_k_above_the_logits_vocabulary",
            "vllm_topk_logprobs test_top_k_rejects_k_above_the_logits_vocabulary",
        ),
    ),
    "V10": ((),),
    "V11": (
        (
            f"test_token_exact-{_M}_Gemma4MTP_all_centroids__get_top_tokens-gloo-fbfdea188a",
            f"test_exact_under_divergence-{_M}_Gemma4MTP_all_centroids__get_top_tokens-gloo-6b1592f878",
        ),
    ),
    "V12": (
        tuple(
            f"test_{test}-{_M}_Gemma4MTP_dense__get_top_tokens-gloo-{key}"
            for test, key in (
                ("token_exact", "938efa64ff"),
                ("output_contract", "5e962298b4"),
                ("tp_invariance", "08c1db60cf"),
                ("row_independence", "056194b5f1"),
                ("determinism", "46f0a4f181"),
                ("ranks_agree", "216cca58ff"),
                ("exact_under_divergence", "1746e1fc94"),
            )
        ),
    ),
    "V13": ((f"test_token_exact-{_M}_Gemma4MTP_all_centroids__compute_logits-gloo-8875532f20",),),
    "D1": (
        (
            f"test_token_exact-{_M}_Gemma4MTP_get_top_tokens-gloo-a2aa585bb4",
            f"test_token_exact-{_M}_Gemma4MTP_compute_logits-gloo-51a8c44849",
            "test_token_exact-engines_vllm_corrected_Gemma4MTP_get_top_tokens-gloo-faf918a589",
            f"test_exact_under_divergence-{_M}_Gemma4MTP_get_top_tokens-gloo-5473adcc3c",
            "test_exact_under_divergence-engines_vllm_corrected_Gemma4MTP_get_top_tokens-gloo-9d39c446ad",
            f"test_exact_under_divergence-{_M}_Gemma4MTP_compute_logits-gloo-a0d1b1b19e",
        ),
    ),
    "D2": (
        (
            "test_rejects_bad_input-vllm-gloo-5ceda44809",
            "test_rejects_bad_input-vllm-gloo-ec122bc429",
            "test_rejects_bad_input-vllm-gloo-2de485d40d",
            "test_rejects_bad_input-vllm_classic-gloo-37a92ccf1e",
            "test_rejects_bad_input-vllm_classic-gloo-294844ec41",
            "test_rejects_bad_input-engines_vllm_corrected_vllm-gloo-534bf2e794",
            "test_rejects_bad_input-engines_vllm_corrected_vllm-gloo-6b9f659bd3",
            "test_rejects_bad_input-engines_vllm_corrected_vllm-gloo-527d095c29",
            "test_rejects_bad_input-engines_vllm_corrected_vllm_classic-gloo-e8e3080651",
            "test_rejects_bad_input-engines_vllm_corrected_vllm_classic-gloo-eec574c605",
        ),
    ),
    "D3": (
        (
            "test_token_exact-trtllm_style-gloo-e01cfa5598",
            "test_token_exact-trtllm_style-gloo-cb3be3d788",
            "test_output_contract-trtllm_style-gloo-c1e18c1513",
            "test_output_contract-trtllm_style-gloo-3f2291f012",
            "test_determinism-trtllm_style-gloo-d9874b3002",
            "trtllm_style test_ids_beyond_float32_are_exact_or_rejected",
            "test_all_neg_inf_row_with_offset_d2t-trtllm_style-gloo-cc22221985",
            # its padding, under the layouts beyond one even split (its attention-DP and uneven branches included)
            "test_exact_under_divergence-trtllm_style-gloo-20309c6dcf",
            "test_attention_dp_rows-trtllm_style-gloo-a6c2bf03e8",
            "test_uneven_shards-trtllm_style-gloo-6e088c0f8e",
        ),
    ),
    "D4": ((),),
}
# what a reason says that this release's failures add to
WHY = {
    "D2": previous.REASONS[1].why.replace(
        "The negative scale is rejected with a ValueError, whose message names 'logit scaling factors' rather than "
        "the argument.",
        "The local path rejects a negative scale with a ValueError whose message names 'logit scaling factors' "
        "rather than the argument; the classic path (`LogitsProcessor.forward`) accepts it.",
    ),
}


def _carried(cause):
    """A 0.32.0 cause as this release's page claims it: its failures, and the reach its new classes add."""
    more = REACHES.get(cause.id)
    return cause.claiming(FAILURES[cause.id], f"{cause.reaches}; in 0.33.0 also {more}" if more else "")


def _reason(reason):
    return replace(reason, failures=FAILURES[reason.id][0], why=WHY.get(reason.id, reason.why))


_MUSE = "vllm/models/muse_spark/nvidia/model.py"
NEW = (
    Cause(
        id="V14",
        title="MuseSpark1x's local argmax ranks the raw logits; its compute_logits applies the output multiplier and "
        "tanh soft cap first",
        script=f"{PAGE}/V14-muse-spark-output-transform.py",
        where=f"{_MUSE} (and models/muse_spark/amd/model.py): MuseSpark1xForCausalLM.compute_logits, "
        "LocalArgmaxMixin.get_top_tokens (inherited through LlamaForCausalLM)",
        severity="shipped",
        reaches=(
            "MuseSpark1xForCausalLM served as a draft (`draft_model`) with `use_local_argmax_reduction`, whenever its "
            "config sets `final_logit_softcapping` (read at `nvidia/model.py:1799`); the proposer's greedy step calls "
            "`get_top_tokens` (`vllm/v1/spec_decode/llm_base_proposer.py:440`)"
        ),
        evidence=(
            f"{_MUSE}:1750: class MuseSpark1xForCausalLM(LlamaForCausalLM, SupportsLoRA, MixtureOfExperts):",
            f"{_MUSE}:1799: self.output_soft_cap_temp = config.final_logit_softcapping",
            f"{_MUSE}:1889: return self.mul_tanh_soft_cap(logits)",
            "vllm/model_executor/models/interfaces.py:1598: top = self.logits_processor.get_top_tokens(",
        ),
        why=(
            "MuseSpark1x's `compute_logits` multiplies the processor's logits by `output_multiplier` and caps them "
            "with `final_logit_softcapping * tanh(x / final_logit_softcapping)` (fused in `MulTanhSoftCap`); its "
            "constructor sets the processor's own scale to 1 and gives it no cap. `get_top_tokens` is "
            "LocalArgmaxMixin's, inherited through LlamaForCausalLM: it ranks the processor's logits, which have "
            "neither. Both are monotone, so the choice changes only where the cap rounds distinct logits to one "
            "float32 value: the classic path then takes the lowest id, the local path the larger raw logit."
        ),
        failures=(
            f"test_token_exact-{_M}_MuseSpark1xForCausalLM_get_top_tokens-gloo-a7b148d205",
            f"test_token_exact-{_M}_MuseSpark1xForCausalLM_amd__get_top_tokens-gloo-cf2958a761",
            f"test_exact_under_divergence-{_M}_MuseSpark1xForCausalLM_get_top_tokens-gloo-927b159398",
            f"test_exact_under_divergence-{_M}_MuseSpark1xForCausalLM_amd__get_top_tokens-gloo-6174fc5d2f",
        ),
        correction=(
            "`engines/vllm/corrections/muse_spark.py:muse_spark_top_tokens` ranks each shard's token logits after the "
            "class's own output transform (element-wise: a shard's values are the gathered row's), with the "
            "corrected ranking of `engines/vllm/corrections/processor.py:get_top_tokens` (its `transform`)"
        ),
    ),
)
_XPRESS = "vllm/v1/worker/gpu/spec_decode/xpress/kernels.py"
_XPRESS_HEAD = "vllm/model_executor/models/qwen3_xpress.py"
_LOGITS = "vllm/model_executor/layers/logits_processor.py"
_XP = "engines_vllm_xpress_argmax_vllm_xpress"  # the XPress subjects' repro files, by module and name
_XP_ROW = "vllm_xpress_candidate_argmax"
_INTERPRET = "TRITON_INTERPRET=1 "  # the XPress rows' replays run under Triton's interpreter here
XPRESS = (
    Cause(
        id="V15",
        title="XPress's top-C argmax takes the first maximum in the order _topk returned the candidates, not the "
        "smallest id",
        script=f"{PAGE}/V15-xpress-candidate-tie-order.py",
        where=f"{_XPRESS}: fused_topc_argmax_to_blk (`_xpress_topc_argmax_to_blk_kernel`), over the candidates of "
        f"{_LOGITS}: `_topk`, as XPressRefinerHead.jacobi_refine_greedy calls them",
        severity="shipped",
        reaches=(
            "Qwen3XPressForCausalLM's draft (`XPressSpeculator._jacobi_refine`, "
            "`vllm/v1/worker/gpu/spec_decode/xpress/speculator.py:93`) whenever `xpress_topc` > 0, the default: "
            f"`topc=getattr(config, 'xpress_topc', 512)` (`{_XPRESS_HEAD}:263`); every Jacobi pass of "
            "`XPressRefinerHead.jacobi_refine_greedy` picks a draft slot's token with it"
        ),
        evidence=(
            f"{_XPRESS_HEAD}:153: base_c, cand = _topk(slots.reshape(rows, v), c)",
            f"{_LOGITS}:52: return torch.topk(scores, k, dim=-1)",
            f"{_LOGITS}:53: return impl(scores, k, sorted=True, deterministic=True)",
            f"{_XPRESS}:361: best = tl.argmax(s, axis=0)",
            f"{_XPRESS}:362: tok = tl.load(cand_ptr + row * C + best)",
        ),
        why=(
            "`jacobi_refine_greedy` takes each row's top C (`_topk`: `torch.topk`, or FlashInfer's radix top-k on a "
            "GPU where it is installed) and hands the candidates to `fused_topc_argmax_to_blk` in the order the "
            "top-k returned them, largest logit first, with no order among equal logits (its comment: 'the candidate "
            "set is only ever indexed, never traversed in rank order, so its ordering does not matter'). The kernel's "
            "`tl.argmax` takes the first position among equal maxima and maps it to `cand[best]`: the id the top-k "
            "happened to put first, not the smallest id the contract and the full-vocabulary kernel "
            "(`fused_add_argmax_to_blk`, columns in id order) take. Two ids on different ranks with the same logit, "
            "a row of equal logits (all `-inf`), or `+0.0` beside `-0.0` give another token than the classic path; "
            "where more than C ids tie at the maximum the smallest may not be a candidate at all."
        ),
        failures=(
            f"{_INTERPRET}test_token_exact-{_XP}_candidate_argmax-gloo-e4258071c8",
            f"{_XP_ROW} test_all_neg_inf_row_with_offset_d2t",
            f"{_XP_ROW} test_the_flag_fires_exactly_on_non_monotone_tables",
            f"{_XP_ROW} test_the_flag_fires_exactly_on_non_monotone_tables #2",
            f"{_XP_ROW} test_the_flag_fires_exactly_on_non_monotone_tables #3",
            f"{_XP_ROW} test_a_single_inversion_among_32000_ids_is_found_and_shrunk",
        ),
        correction=(
            "`engines/vllm/subjects/xpress_argmax.py:topk_by_id`, in place of the `_topk` that `qwen3_xpress` calls, "
            "chooses the top C with ties at the boundary kept by the smallest id (a stable descending sort) and "
            "returns them in ascending id order, so the same kernel's first maximum is the smallest id among equal "
            "maxima"
        ),
    ),
)
NEW += XPRESS
_INTERPRETER = "triton/runtime/interpreter.py"
REASONS = (
    Reason(
        id="I1",
        title="Triton's CPU interpreter reduces a maximum with NumPy's nanmax: a NaN never wins, and an all-NaN slice "
        "raises; a GPU does neither",
        why=f"Under `TRITON_INTERPRET=1` a `tl.max(..., return_indices=True)` or `tl.argmax` is NumPy's: "
        f"`ReduceOps.apply_impl` maps the argmax combines to `min_max(..., val_reduce_op=np.nanmax, "
        f"idx_reduce_op=np.nanargmax)` ({_INTERPRETER}:1168-1169, triton 3.9.0), so a NaN lane is skipped where a "
        "number is beside it, and `np.nanargmax` raises `ValueError('All-NaN slice encountered')` on a slice with "
        f"no number, which the interpreter wraps as `InterpreterError` ({_INTERPRETER}:1515). The XPress rows run "
        "vLLM's kernels under the interpreter here: `vllm_xpress_argmax` gives a number where the contract's answer "
        "is the first NaN (`Case(batch=4, hidden=5, vocab=700, tp=4, bias=True, specials=('nan_ranks',), "
        "d2t='eagle3', target_extra=900)`), and the candidate kernel's one-lane block of a one-id row whose logit "
        "is NaN (`Case(batch=1, hidden=3, vocab=1, tp=2, bias=True, specials=('pos_inf', 'neg_inf_rows'))`: "
        "`inf * -1 + inf`) raises; the corrected candidate row, the same kernel, fails both cases alike. Compiled "
        "Triton reduces with its own combine and returns an index, so what vLLM's kernels give for NaN is for a GPU "
        "run to judge; these failures are the interpreter's, not vLLM's.",
        failures=(
            f"{_INTERPRET}test_token_exact-{_XP}_argmax-gloo-7ca9dcd826",
            f"{_INTERPRET}test_row_independence-{_XP}_candidate_argmax-gloo-71cd05875e",
            f"{_INTERPRET}test_token_exact-{_XP}_candidate_argmax_corrected-gloo-c2df538e68",
            f"{_INTERPRET}test_row_independence-{_XP}_candidate_argmax_corrected-gloo-c4e1f9c58f",
        ),
    ),
)
CAUSES = tuple(_carried(cause) for cause in previous.FINDINGS.causes) + NEW
# XPress ships from 0.33.0 on, whose engine cannot run here: its cause is not judged end to end on 0.32.0 either
NO_XPRESS_ENGINE = (
    "XPress ships from vLLM 0.33.0 on, and 0.33.0 has only its CUDA wheel, whose CPU attention is one of the kernels "
    "it lacks: its engine cannot run on a CPU, and 0.32.0 has no XPress, so end to end is for a GPU run to judge"
)
FINDINGS = Findings(
    f"vLLM {RELEASE}",
    PAGE,
    CAUSES,
    tuple(_reason(reason) for reason in previous.REASONS) + REASONS,
    tuple(EndToEnd(c.id, why=NO_XPRESS_ENGINE if c in XPRESS else NO_ENGINE) for c in CAUSES),
    previous=f"{previous.__name__}:FINDINGS",
)
