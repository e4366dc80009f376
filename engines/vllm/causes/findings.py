"""What vLLM 0.32.0's failures on ``docs/conformance/vllm-0.32.0.md`` come from: causes, consequences, reasons.

Every failure on the page is claimed by its key (:func:`engines.findings.failure_key`: its repro file's name, or
``SUBJECT TEST`` where it has none): by a cause in :mod:`engines.vllm.causes.logits` (V1 to V10, the
``LogitsProcessor``) or :mod:`engines.vllm.causes.gemma4` (V11 to V13, Gemma4's MTP head), or by a reason here;
:mod:`engines.vllm.causes.proposers` (V17 to V19, the V1 proposers) claims none, its reproductions show them.
``tests/test_findings.py`` checks that each is claimed exactly once and that no claim is stale.
"""

from __future__ import annotations

from engines.findings import Findings, Reason
from engines.versions import VLLM_VERSION
from engines.vllm.causes import e2e as findings_e2e
from engines.vllm.causes import gemma4 as findings_gemma4
from engines.vllm.causes import logits as findings_logits
from engines.vllm.causes import proposers as findings_proposers
from engines.vllm.causes import topk as findings_topk
from engines.vllm.causes.logits import PAGE

REASONS = (
    Reason(
        id="D1",
        title="Gemma4's centroid masking is approximate by design",
        why=(
            "Gemma4's assistant scores only the tokens of its best centroids: a small linear layer ranks the "
            "clusters of the reordered vocabulary, and logits are computed for the tokens of the top "
            "`centroid_intermediate_top_k` only (2048 centroids and 32 kept by default, `gemma4_mtp.py:497-498`: "
            "4,096 of 262,144 tokens). It is an approximation chosen so the drafter avoids the full-vocabulary "
            "product, and transformers' assistant uses the same scheme. When the best token sits in an unselected "
            "centroid both `compute_logits` and `get_top_tokens` return the best candidate instead; the target's "
            "verification rejects that draft, which costs acceptance, never output. In 0.32.0's F42 and F44 the "
            "maximum (token 900) is in centroid 5 while centroids 6 and 4 are kept; in its F43, F45 and F124, with "
            "inputs that differ per rank, the lowest of the ids at the soft cap, 11, is in a centroid left out (with "
            "every centroid kept, the corrected head returns 11)."
        ),
        failures=(
            "test_token_exact-engines_vllm_models_Gemma4MTP_get_top_tokens-gloo-a2aa585bb4",
            "test_token_exact-engines_vllm_models_Gemma4MTP_compute_logits-gloo-51a8c44849",
            "test_token_exact-engines_vllm_corrected_Gemma4MTP_get_top_tokens-gloo-faf918a589",
            "test_exact_under_divergence-engines_vllm_models_Gemma4MTP_get_top_tokens-gloo-5473adcc3c",
            "test_exact_under_divergence-engines_vllm_corrected_Gemma4MTP_get_top_tokens-gloo-9d39c446ad",
            "test_exact_under_divergence-engines_vllm_models_Gemma4MTP_compute_logits-gloo-a0d1b1b19e",
        ),
    ),
    Reason(
        id="D2",
        title="input validation the suite asks for and vLLM leaves to the model's configuration",
        why="The suite's contract asks every implementation to reject bad input with a ValueError that names the "
        "argument. vLLM's head takes its shapes from the model's configuration and does not check them on the hot "
        "path: a hidden size, bias length or d2t target that does not match cannot come from a loaded model. The "
        "negative scale is rejected with a ValueError, whose message names 'logit scaling factors' rather than the "
        "argument. None of these changes a token for input a model can produce.",
        failures=(
            "test_rejects_bad_input-vllm-gloo-5ceda44809",
            "test_rejects_bad_input-vllm-gloo-5cd797f051",
            "test_rejects_bad_input-vllm-gloo-2de485d40d",
            "test_rejects_bad_input-vllm_classic-gloo-59d55d1d89",
            "test_rejects_bad_input-vllm_classic-gloo-294844ec41",
            "test_rejects_bad_input-engines_vllm_corrected_vllm-gloo-534bf2e794",
            "test_rejects_bad_input-engines_vllm_corrected_vllm-gloo-bea55bd1a5",
            "test_rejects_bad_input-engines_vllm_corrected_vllm-gloo-527d095c29",
            "test_rejects_bad_input-engines_vllm_corrected_vllm_classic-gloo-b788d731c1",
            "test_rejects_bad_input-engines_vllm_corrected_vllm_classic-gloo-eec574c605",
        ),
    ),
    Reason(
        id="D3",
        title="`trtllm_style` is the project's model of a defect, not vLLM's code",
        why="An engine variant written from the spec's facts about TensorRT-LLM's local argmax: ids from the rank "
        "offset with no padding mask, carried in float32. Its failures are the defects it was written to show the "
        "suite catching: padding ids returned (and then past `d2t`'s end) and ids above 2**24 rounded.",
        failures=(
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
    Reason(
        id="D4",
        title=(
            "vLLM's CPU build multiplies the head with oneDNN, whose float32 sums round differently from the oracle's"
        ),
        why=(
            "The suite asks top-k values to be the classic logits bit for bit, and its oracle computes them with "
            "torch's `F.linear`. On the CPU, vLLM's unquantized head goes through oneDNN "
            "(`vllm/model_executor/layers/utils.py:588: layer.cpu_linear = lambda x, weight, bias: "
            "ops.onednn_mm(handler, x, bias)`), whose summation order differs for some shapes (hidden 256 and 64 "
            "here): the last bits of a logit differ, by a few ulps. It is the platform's arithmetic, not "
            "`LogitsProcessor`'s: vLLM's classic path takes the same product, and the uncorrected `vllm_topk` "
            "fails the same case the same way. These failures are the corrected rows': the case is an explicit "
            "example the suite gained after the original rows were recorded."
        ),
        failures=(
            "test_top_k_exact-engines_vllm_corrected_vllm_topk-gloo-cfbe8d8df8",
            "TPARGMAX_VLLM_SHM=1 test_top_k_exact-engines_vllm_corrected_vllm_topk-gloo-75e8778012",
            "test_top_k_exact-engines_vllm_corrected_DFlash2Qwen3ForCausalLM_get_top_k_tokens-gloo-cbfc441713",
        ),
        needs="cpu_kernels",  # oneDNN is one of them
    ),
)

FINDINGS = Findings(
    f"vLLM {VLLM_VERSION}",
    PAGE,
    findings_logits.CAUSES + findings_topk.CAUSES + findings_gemma4.CAUSES + findings_proposers.CAUSES,
    REASONS,
    findings_e2e.END_TO_END,
)
