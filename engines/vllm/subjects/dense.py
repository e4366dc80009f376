"""vLLM's dense Llama-like causal LMs under test: built from a tiny config on the CPU (Llama4's head reproduced)."""

from __future__ import annotations

from types import SimpleNamespace

from engines.vllm.wheel.build import (
    NO_CPU_BUILD,
    Built,
    Subject,
    causal,
    head_pin,
    llama_config,
    lm_head,
    logits_processor,
    model_class,
    qwen3_config,
    reproduced,
    stand_in,
    standard,
)

MUSE, MUSE_AMD = "vllm.models.muse_spark.nvidia.model", "vllm.models.muse_spark.amd.model"
MUSE_MULTIPLIER, MUSE_CAP = 0.5, 15.0  # its config's output_multiplier and final_logit_softcapping
TELEFLM_MUP = {"use_mup": True, "mup_scale_factor": 2.0, "output_mult": 1.0}  # scale = output_mult / mup_scale_factor
TELEFLM_SCALE = 0.5


def _build_muse_spark(module: str, name: str) -> Built:
    """``MuseSpark1xForCausalLM`` (``name``: ``MuseSparkForCausalLM`` from 0.34.0 on): LlamaForCausalLM's head (its
    constructor sets the processor's scale to 1) and its own output transform, ``MulTanhSoftCap(output_multiplier,
    final_logit_softcapping)``; ``get_top_tokens`` is the inherited ``LocalArgmaxMixin``'s, ``compute_logits`` the
    class's own (the AMD module's through ``_apply_output_transform``)."""
    from vllm.models.muse_spark.common.layers import MulTanhSoftCap

    klass = model_class(module, name)
    helper = ("_apply_output_transform",)  # what the AMD module's compute_logits calls on the object
    obj = stand_in(
        name,
        {n: getattr(klass, n) for n in helper if hasattr(klass, n)},
        lm_head=lm_head(1000),
        logits_processor=logits_processor(1000),
        metap_output_multiplier=MUSE_MULTIPLIER,
        output_soft_cap_temp=MUSE_CAP,
        mul_tanh_soft_cap=MulTanhSoftCap(multiplier=MUSE_MULTIPLIER, soft_cap_temp=MUSE_CAP),
        draft_id_to_target_id=None,
        model=SimpleNamespace(mono=None),  # the AMD module's ROCm runtime, whose health compute_logits polls: none here
    )
    return standard(obj, klass)  # the class's methods looked up at each call: a correction patched on it runs


# its classic logits, soft_cap_temp * tanh(x * multiplier / soft_cap_temp), are the suite's soft cap (temp / multiplier)
# then scale (multiplier): the same float32 numbers, the multiplier a power of two
MUSE_HEAD = head_pin(1000, scale=MUSE_MULTIPLIER, soft_cap=MUSE_CAP / MUSE_MULTIPLIER)
MUSE_HOW = (
    "LlamaForCausalLM's ParallelLMHead(vocab_size) and LogitsProcessor(vocab_size), its scale set to 1, then its "
    f"output transform in compute_logits (output_multiplier {MUSE_MULTIPLIER}, final_logit_softcapping {MUSE_CAP} here)"
)


def _muse_spark(name: str, since: str, until: str = "") -> dict[str, Subject]:
    """The class ``name`` from the NVIDIA module (which every platform but ROCm loads) and the AMD one (ROCm's), as
    subjects keyed ``name`` and ``name[amd]``."""
    nvidia = "its MoE layers need CUDA kernels (the NVIDIA module, which every platform but ROCm loads); "
    amd = f"as {name}, from the AMD module (ROCm's), whose compute_logits goes through _apply_output_transform; "
    return {
        key: Subject(
            name,
            module,
            MUSE_HEAD,
            lambda module=module: _build_muse_spark(module, name),
            NO_CPU_BUILD + how + MUSE_HOW,
            since=since,
            until=until,
        )
        for key, module, how in ((name, MUSE, nvidia), (f"{name}[amd]", MUSE_AMD, amd))
    }


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
    **_muse_spark("MuseSpark1xForCausalLM", since="0.33.0", until="0.34.0"),
    **_muse_spark("MuseSparkForCausalLM", since="0.34.0"),  # the same class, renamed
    "Llama4ForCausalLM": reproduced(
        "llama4",
        "Llama4ForCausalLM",
        1000,
        None,
        "its MoE decoder layers were not built on the CPU here; it runs LlamaForCausalLM's constructor: "
        "ParallelLMHead(vocab_size), LogitsProcessor(vocab_size, scale=logit_scale), logit_scale 1",
    ),
}
