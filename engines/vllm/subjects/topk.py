"""vLLM's top-k users under test: DFlash-style drafts whose ``compute_candidates`` calls ``get_top_k_tokens``.

Their layers need a Qwen3 target's hidden states and attention metadata; the heads are reproduced.
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
    head_pin,
    lm_head,
    logits_processor,
    model_class,
    stand_in,
    standard,
)

DFLASH_VOCAB = 1000
DFLASH2_SCALE, DFLASH2_SOFT_CAP = 0.5, 30.0  # dflash_config output_multiplier and final_logit_softcapping
BEAM = "vllm.models.beam.nvidia.dflash2"


def _build_candidates(
    module: str, cls: str, holder: str, attr: str, processor: dict[str, Any], *, one_processor: bool = False
) -> Callable[[], Built]:
    """DFlash-style drafts: ``compute_candidates`` = ``candidate_logits_processor.get_top_k_tokens(self.lm_head, h,
    <k from the draft config>)``; the local argmax and classic paths are ``Qwen3ForCausalLM``'s (inherited).  With
    ``one_processor`` (DFlash2Beam) the class has a single ``logits_processor``, built with ``processor``."""

    def build() -> Built:
        klass = model_class(module, cls)
        inner = SimpleNamespace(**{holder: SimpleNamespace(**{attr: 1})})
        names = ("compute_candidates", "get_top_tokens", "compute_logits")
        methods = {n: getattr(klass, n) for n in names if hasattr(klass, n)}  # DFlash2Beam has no get_top_tokens
        obj = stand_in(
            cls,
            methods,
            lm_head=lm_head(DFLASH_VOCAB),
            model=inner,
            logits_processor=logits_processor(**processor) if one_processor else logits_processor(DFLASH_VOCAB),
            candidate_logits_processor=logits_processor(**processor),
        )

        def top_k(h: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
            setattr(getattr(inner, holder), attr, k)  # the draft config's candidate count
            return obj.compute_candidates(h)

        return standard(obj, get_top_k_tokens=top_k)

    return build


SUBJECTS: dict[str, Subject] = {
    "DFlash2Qwen3ForCausalLM": Subject(
        "DFlash2Qwen3ForCausalLM",
        f"{MODELS}.qwen3_dflash2",
        head_pin(DFLASH_VOCAB, scale=DFLASH2_SCALE, soft_cap=DFLASH2_SOFT_CAP),
        _build_candidates(
            f"{MODELS}.qwen3_dflash2",
            "DFlash2Qwen3ForCausalLM",
            "candidate_selector",
            "top_k",
            {"vocab": DFLASH_VOCAB, "scale": DFLASH2_SCALE, "soft_cap": DFLASH2_SOFT_CAP},
        ),
        NO_CPU_BUILD + "its grouped-conv DFlash layers need a Qwen3 target's hidden states and attention metadata; "
        "output_multiplier 0.5 and final_logit_softcapping 30 (top-k path), the argmax paths Qwen3ForCausalLM's",
        ("get_top_k_tokens",),
    ),
    "DFlash2BeamForCausalLM": Subject(
        "DFlash2BeamForCausalLM",
        BEAM,
        head_pin(DFLASH_VOCAB, soft_cap=DFLASH2_SOFT_CAP),
        _build_candidates(
            BEAM,
            "DFlash2BeamForCausalLM",
            "candidate_selector",
            "top_k",
            {"vocab": DFLASH_VOCAB, "soft_cap": DFLASH2_SOFT_CAP},
            one_processor=True,
        ),
        NO_CPU_BUILD + "its DFlash2 beam layers need a target's hidden states and attention metadata; "
        "LogitsProcessor(vocab_size, soft_cap=final_logit_softcapping), always capped (30 here), no scale; "
        "it has no get_top_tokens",
        ("get_top_k_tokens",),
        since="0.33.0",
    ),
    "LiLiCorrForCausalLM": Subject(
        "LiLiCorrForCausalLM",
        f"{MODELS}.lilicorr",
        head_pin(DFLASH_VOCAB),
        _build_candidates(
            f"{MODELS}.lilicorr", "LiLiCorrForCausalLM", "lilicorr", "candidate_topk", {"vocab": DFLASH_VOCAB}
        ),
        NO_CPU_BUILD + "its lattice attention needs a Qwen3 target's hidden states and attention metadata; "
        "compute_candidates asks for log-probabilities",
        ("get_top_k_tokens",),
        "log_probs",
    ),
}
