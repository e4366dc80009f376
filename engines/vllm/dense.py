"""vLLM's dense Llama-like causal LMs under test: built from a tiny config on the CPU (Llama4's head reproduced)."""

from __future__ import annotations

from engines.vllm.build import Subject, causal, llama_config, qwen3_config, reproduced

TELEFLM_MUP = {"use_mup": True, "mup_scale_factor": 2.0, "output_mult": 1.0}  # scale = output_mult / mup_scale_factor
TELEFLM_SCALE = 0.5

SUBJECTS: dict[str, Subject] = {
    "LlamaForCausalLM": causal("llama", "LlamaForCausalLM", llama_config(1000), "built"),
    "Qwen3ForCausalLM[untied]": causal("qwen3", "Qwen3ForCausalLM", qwen3_config(1000, tied=False), "built"),
    "Qwen3ForCausalLM[tied]": causal(
        "qwen3",
        "Qwen3ForCausalLM",
        qwen3_config(1000, tied=True),
        "built (tie_word_embeddings: the head is the input embedding)",
    ),
    "MistralForCausalLM": causal(
        "mistral",
        "MistralForCausalLM",
        llama_config(1000, architectures=["MistralForCausalLM"], model_type="mistral", head_dim=16),
        "built (transformers' MistralConfig)",
    ),
    "Phi3ForCausalLM": causal(
        "phi3",
        "Phi3ForCausalLM",
        llama_config(1000, architectures=["Phi3ForCausalLM"], model_type="phi3"),
        "built (transformers' Phi3Config)",
    ),
    "Ernie4_5ForCausalLM": causal(
        "ernie45",
        "Ernie4_5ForCausalLM",
        llama_config(1000, architectures=["Ernie4_5ForCausalLM"], model_type="ernie4_5", head_dim=16),
        "built (transformers' Ernie4_5Config)",
    ),
    "TeleChat2ForCausalLM": causal(
        "telechat2",
        "TeleChat2ForCausalLM",
        llama_config(
            1000,
            architectures=["TeleChat2ForCausalLM"],
            n_layer=1,
            n_head=4,
            ffn_hidden_size=128,
            layer_norm_epsilon=1e-6,
        ),
        "built (its config is remote code: a LlamaConfig carrying TeleChat2's field names)",
    ),
    "TeleFLMForCausalLM": causal(
        "teleflm",
        "TeleFLMForCausalLM",
        llama_config(1000, architectures=["TeleFLMForCausalLM"], use_mup=False),
        "built (its config is remote code: a LlamaConfig with use_mup false)",
    ),
    "TeleFLMForCausalLM[mup]": causal(
        "teleflm",
        "TeleFLMForCausalLM",
        llama_config(1000, architectures=["TeleFLMForCausalLM"], **TELEFLM_MUP),
        "built (a LlamaConfig with use_mup: LogitsProcessor(scale=output_mult / mup_scale_factor = 0.5))",
        scale=TELEFLM_SCALE,
    ),
    "MossQwen3ForCausalLM": causal(
        "moss_audio",
        "MossQwen3ForCausalLM",
        qwen3_config(1000, tied=False),
        "built directly (MossAudio's language model, not in the registry; a Qwen3Config)",
        registered=False,
    ),
    "Llama4ForCausalLM": reproduced(
        "llama4",
        "Llama4ForCausalLM",
        1000,
        None,
        "its MoE decoder layers were not built on the CPU here; it runs LlamaForCausalLM's constructor: "
        "ParallelLMHead(vocab_size), LogitsProcessor(vocab_size, scale=logit_scale), logit_scale 1",
    ),
}
