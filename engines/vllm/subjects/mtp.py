"""vLLM's multi-token-prediction heads under test: DeepSeek-style MTP predictors, Qwen3.5's and Inkling's.

None builds on the CPU (CUDA or ROCm kernels, an absent torchvision, a target's head): each head is reproduced, and
where the class's module cannot be imported here its methods are compiled from the installed file.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from engines.vllm.wheel.build import (
    MODELS,
    NO_CPU_BUILD,
    Built,
    Subject,
    class_methods,
    head_pin,
    lm_head,
    logits_processor,
    source_methods,
    stand_in,
    standard,
)

MTP_VOCAB = 1000
INKLING_VOCAB, INKLING_PADDED = 1000, 1024
_V32 = "vllm.models.deepseek_v32.nvidia.mtp"
_V4_AMD = "vllm.models.deepseek_v4.amd.mtp"
_GLM5 = "vllm.models.glm5next.common.mtp"
_INKLING_NV, _INKLING_AMD = "vllm.models.inkling.nvidia.mtp", "vllm.models.inkling.amd.mtp"
_STEP5 = "vllm.models.step5.nvidia.mtp"


class _SharedHead:
    """An MTP layer's ``shared_head``: its ``head``; called (Step5 normalises before the head), it is the identity,
    so the case's hidden states are the head's input."""

    def __init__(self, head: Any) -> None:
        self.head = head

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden


def _mtp_predictor(
    module: str, outer: str, inner: str, *, importable: bool, layers: str, pre_head: bool = False
) -> Callable[[], Built]:
    """DeepSeek-style MTP: ``OUTER.get_top_tokens`` -> ``self.model.get_top_tokens(h, step)`` ->
    ``logits_processor.get_top_tokens(layer.shared_head.head, h)``, the head the proposer shares from the target."""

    def build() -> Built:
        head = lm_head(MTP_VOCAB)
        layer = SimpleNamespace(shared_head=_SharedHead(head))
        inner_methods = class_methods(module, inner, ("get_top_tokens", "compute_logits"), importable)
        if pre_head:  # the hidden-state transform before the head (hc_head + RMSNorm): the case's hidden is its output
            inner_methods["_pre_head"] = lambda self, layer, h: h
        holder = {"layers": {"1": layer}} if layers == "layers" else {"_mtp_layers": [layer]}
        model = stand_in(
            inner,
            inner_methods,
            mtp_start_layer_idx=1,
            num_mtp_layers=1,
            logits_processor=logits_processor(MTP_VOCAB),
            **holder,
        )
        outer_methods = class_methods(module, outer, ("get_top_tokens", "compute_logits"), importable)
        obj = stand_in(outer, outer_methods, model=model)
        return standard(obj, head=head)

    return build


def _build_qwen3_5_mtp() -> Built:
    """``Qwen3_5MTP`` defines no ``get_top_tokens``: it is ``LocalArgmaxMixin``'s, run on the constructor's pieces."""
    from vllm.model_executor.models.interfaces import LocalArgmaxMixin

    qwen_methods = {
        "get_top_tokens": LocalArgmaxMixin.get_top_tokens,
        **source_methods("vllm.model_executor.models.qwen3_5_mtp", "Qwen3_5MTP", ("compute_logits",)),
    }
    obj = stand_in("Qwen3_5MTP", qwen_methods, lm_head=lm_head(MTP_VOCAB), logits_processor=logits_processor(MTP_VOCAB))
    return standard(obj)


def _build_inkling(module: str, importable: bool) -> Built:
    """``InklingMTP``: the target's ``ParallelLMHead(padded_vocab_size, org_num_embeddings=padded_vocab_size)``
    (attached by the proposer) and ``LogitsProcessor(padded_vocab_size, org_vocab_size=vocab_size, soft_cap=...)``."""
    methods = class_methods(module, "InklingMTP", ("get_top_tokens", "compute_logits"), importable)
    config = SimpleNamespace(logits_mup_width_multiplier=None)
    obj = stand_in(
        "InklingMTP",
        methods,
        config=config,
        lm_head=lm_head(INKLING_PADDED, INKLING_PADDED),
        logits_processor=logits_processor(INKLING_PADDED, org_vocab_size=INKLING_VOCAB),
        _logits_zero=None,
    )
    return standard(obj)


SUBJECTS: dict[str, Subject] = {
    "Qwen3_5MTP": Subject(
        "Qwen3_5MTP",
        f"{MODELS}.qwen3_5_mtp",
        head_pin(MTP_VOCAB),
        _build_qwen3_5_mtp,
        NO_CPU_BUILD + "its module does not import here (torchvision is absent: the CPU install removes it); "
        "get_top_tokens is LocalArgmaxMixin's, compute_logits compiled from the installed file",
    ),
    "DeepseekV32MTP": Subject(
        "DeepseekV32MTP",
        _V32,
        head_pin(MTP_VOCAB),
        _mtp_predictor(_V32, "DeepseekV32MTP", "DeepseekV32MultiTokenPredictor", importable=True, layers="layers"),
        NO_CPU_BUILD + "its MLA/sparse-indexer decoder layer and fused MoE need CUDA kernels (the NVIDIA module; "
        "the AMD one has no get_top_tokens)",
    ),
    "DeepSeekV4MTP": Subject(
        "DeepSeekV4MTP",
        _V4_AMD,
        head_pin(MTP_VOCAB),
        _mtp_predictor(
            _V4_AMD, "DeepSeekV4MTP", "DeepSeekV4MultiTokenPredictor", importable=False, layers="layers", pre_head=True
        ),
        NO_CPU_BUILD + "only the AMD module defines get_top_tokens, and importing it aborts the process on a CPU "
        "(ROCm ops): its methods are compiled from the installed file; the hc_head + RMSNorm before the head is "
        "left out (the case's hidden states are the head's input)",
    ),
    "Glm5NextMTP": Subject(
        "Glm5NextMTP",
        _GLM5,
        head_pin(MTP_VOCAB),
        _mtp_predictor(_GLM5, "Glm5NextMTP", "Glm5NextMultiTokenPredictor", importable=False, layers="_mtp_layers"),
        NO_CPU_BUILD + "its module does not import here (torchvision is absent); its methods are compiled from the "
        "installed file",
    ),
    "Step5MTP": Subject(
        "Step5MTP",
        _STEP5,
        head_pin(MTP_VOCAB),
        _mtp_predictor(_STEP5, "Step5MTP", "Step5MultiTokenPredictor", importable=False, layers="layers"),
        NO_CPU_BUILD + "its module does not import here (torchvision is absent); its methods are compiled from the "
        "installed file; each MTP layer's shared_head holds its own ParallelLMHead(vocab_size) after an RMSNorm, "
        "left out (the case's hidden states are the head's input)",
        since="0.33.0",
    ),
    "InklingMTP": Subject(
        "InklingMTP",
        _INKLING_NV,
        head_pin(INKLING_PADDED, logits_vocab=INKLING_VOCAB),
        lambda: _build_inkling(_INKLING_NV, importable=True),
        NO_CPU_BUILD + "it holds no head of its own (the proposer attaches the target's), and its predictor needs "
        "the Inkling target (NVIDIA module)",
    ),
    "InklingMTP[amd]": Subject(
        "InklingMTP",
        _INKLING_AMD,
        head_pin(INKLING_PADDED, logits_vocab=INKLING_VOCAB),
        lambda: _build_inkling(_INKLING_AMD, importable=False),
        NO_CPU_BUILD + "as InklingMTP; importing the AMD module aborts the process on a CPU, so its methods are "
        "compiled from the installed file",
    ),
}
