"""vLLM's EAGLE and EAGLE3 drafts under test (and the DFlash/DSpark drafts that carry EAGLE3's ``d2t``).

An EAGLE3 draft's vocabulary is smaller than its target's: ``draft_id_to_target_id`` maps its ids (here a draft of
1000 ids over a target of 1500).  Only ``Eagle3LlamaForCausalLM`` builds on the CPU; the others' heads are reproduced.
"""

from __future__ import annotations

from engines.vllm.wheel.build import MODELS, Built, Subject, build_model, head_pin, llama_config, reproduced, standard

EAGLE3_DRAFT, EAGLE3_TARGET = 1000, 1500
XPRESS_SCALE = 0.5  # Qwen3XPress's config logit_scale (1.0 where absent): a scale the head really takes
_SHARED = "it makes no lm_head (the proposer shares the target's ParallelLMHead(vocab)); LogitsProcessor(vocab_size)"
_D2T = "ParallelLMHead(draft_vocab_size), LogitsProcessor(draft_vocab_size) and draft_id_to_target_id "


def _build_eagle3() -> Built:
    from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM

    draft = llama_config(EAGLE3_TARGET, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=EAGLE3_DRAFT)
    return standard(build_model(llama_config(EAGLE3_TARGET), draft), Eagle3LlamaForCausalLM)


SUBJECTS: dict[str, Subject] = {
    "Eagle3LlamaForCausalLM": Subject(
        "Eagle3LlamaForCausalLM",
        f"{MODELS}.llama_eagle3",
        head_pin(EAGLE3_DRAFT, d2t="eagle3", target_extra=EAGLE3_TARGET - EAGLE3_DRAFT),
        _build_eagle3,
        "built (EAGLE3 draft over a LlamaForCausalLM target, SpeculativeConfig method eagle3)",
    ),
    "Eagle3DeepseekV2ForCausalLM": reproduced(
        "deepseek_eagle3",
        "Eagle3DeepseekV2ForCausalLM",
        EAGLE3_DRAFT,
        EAGLE3_TARGET,
        "its DeepseekV2 (MLA) layers need a DeepSeek target and MLA attention backends",
    ),
    "EagleLlamaForCausalLM": reproduced("llama_eagle", "EagleLlamaForCausalLM", 1000, None, _SHARED),
    "EagleMistralForCausalLM": reproduced("mistral_eagle", "EagleMistralForCausalLM", 1000, None, _SHARED),
    "EagleLlama4ForCausalLM": reproduced(
        "llama4_eagle",
        "EagleLlama4ForCausalLM",
        1000,
        None,
        "its LlamaModel draft needs a Llama4 target; ParallelLMHead(draft_vocab_size) and LogitsProcessor(vocab_size), "
        "both 1000 here, no draft_id_to_target_id",
    ),
    "Eagle3Qwen3ForCausalLM": reproduced(
        "qwen3_eagle3",
        "Eagle3Qwen3ForCausalLM",
        EAGLE3_DRAFT,
        EAGLE3_TARGET,
        _D2T + "(draft 1000 of a 1500 target)",
    ),
    "DFlashQwen3ForCausalLM": reproduced(
        "qwen3_dflash",
        "DFlashQwen3ForCausalLM",
        EAGLE3_DRAFT,
        EAGLE3_TARGET,
        "its DFlash layers need a Qwen3 target's hidden states; " + _D2T + "(draft 1000 of a 1500 target)",
    ),
    "Qwen3DSparkForCausalLM": reproduced(
        "qwen3_dspark",
        "Qwen3DSparkForCausalLM",
        EAGLE3_DRAFT,
        EAGLE3_TARGET,
        "its DSpark layers need a Qwen3 target's hidden states; " + _D2T + "(draft 1000 of a 1500 target)",
    ),
    "Qwen3XPressForCausalLM": reproduced(
        "qwen3_xpress",
        "Qwen3XPressForCausalLM",
        1000,
        None,
        "its XPress refiner and DFlash layers need a Qwen3 target's hidden states; ParallelLMHead(draft_vocab_size), "
        f"LogitsProcessor(draft_vocab_size, scale=logit_scale), logit_scale {XPRESS_SCALE} here, no "
        "draft_id_to_target_id (XPress requires a full-vocabulary draft)",
        since="0.33.0",
        scale=XPRESS_SCALE,
    ),
    "MuseSparkDSparkForCausalLM": reproduced(
        "vllm.models.muse_spark.common.dspark",
        "MuseSparkDSparkForCausalLM",
        EAGLE3_DRAFT,
        EAGLE3_TARGET,
        "its Muse DSpark layers need a MuseSpark target's hidden states; " + _D2T + "(draft 1000 of a 1500 "
        "target); get_top_tokens and compute_logits are Qwen3DSpark's: the output multiplier and tanh cap "
        "(apply_output_logit_transform) apply only in the DSpark speculator's sampling, to neither",
        since="0.33.0",
    ),
}
