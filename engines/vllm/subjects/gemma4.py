"""vLLM's Gemma4 heads under test: ``Gemma4MTP`` (with and without its masked, ordered embedder) and the DSpark draft.

Both need a Gemma4 target on the CPU; their heads are reproduced (tied ``ParallelLMHead``, ``LogitsProcessor`` with
Gemma's ``final_logit_softcapping``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from engines.vllm.wheel.build import (
    HIDDEN,
    MODELS,
    NO_CPU_BUILD,
    Built,
    Subject,
    head_pin,
    lm_head,
    logits_processor,
    reproduced,
    stand_in,
    standard,
)

GEMMA4_VOCAB = 1000
GEMMA4_SOFT_CAP = 30.0  # Gemma's final_logit_softcapping


def _build_gemma4_mtp(centroids: int | None, top_k: int, ordered: bool) -> Callable[[], Built]:
    """``Gemma4MTP``'s head: tied ``ParallelLMHead(vocab)``, ``LogitsProcessor(vocab, soft_cap=final_logit_
    softcapping)``, and (``use_ordered_embeddings``) its ``Gemma4MTPMaskedEmbedder`` with seeded centroids and
    token ordering (the same on every rank: they are replicated)."""

    def build() -> Built:
        from vllm.model_executor.models.gemma4_mtp import Gemma4MTP, Gemma4MTPMaskedEmbedder

        masked = None
        if centroids is not None:
            masked = Gemma4MTPMaskedEmbedder(HIDDEN, GEMMA4_VOCAB, centroids, top_k)
            g = torch.Generator().manual_seed(0)
            masked.centroids.weight.data.copy_(torch.randn(centroids, HIDDEN, generator=g))
            order = torch.randperm(GEMMA4_VOCAB, generator=g) if ordered else torch.arange(GEMMA4_VOCAB)
            masked.token_ordering.copy_(order)
        # the gather of the full head is its own method from 0.34.0 on (_gather_full_lm_head_weight)
        wanted = ("get_top_tokens", "compute_logits", "_get_full_lm_head_weight", "_gather_full_lm_head_weight")
        names = tuple(n for n in wanted if hasattr(Gemma4MTP, n))
        # looked up on the class at each call, so a correction patched onto it (engines.vllm.subjects.corrected) runs
        # here
        methods = {n: lambda self, *a, _n=n, **k: getattr(Gemma4MTP, _n)(self, *a, **k) for n in names}
        obj = stand_in(
            "Gemma4MTP",
            methods,
            lm_head=lm_head(GEMMA4_VOCAB),
            masked_embedding=masked,
            logits_processor=logits_processor(GEMMA4_VOCAB, soft_cap=GEMMA4_SOFT_CAP),
            _stable_full_lm_head_weight=None,
            _suppress_idx=None,
        )

        def reset() -> None:  # Gemma4MTP.load_weights drops the gathered head it caches
            obj._stable_full_lm_head_weight = None

        return replace(standard(obj), reset=reset)

    return build


SUBJECTS: dict[str, Subject] = {
    "Gemma4MTP": Subject(
        "Gemma4MTP",
        f"{MODELS}.gemma4_mtp",
        head_pin(GEMMA4_VOCAB, soft_cap=GEMMA4_SOFT_CAP),
        _build_gemma4_mtp(8, 2, ordered=True),
        NO_CPU_BUILD + "its predictor needs a Gemma4 target's KV sharing; use_ordered_embeddings with 8 centroids "
        "of 125 tokens, the top 2 selected (seeded centroids and token ordering)",
    ),
    "Gemma4MTP[all_centroids]": Subject(
        "Gemma4MTP",
        f"{MODELS}.gemma4_mtp",
        head_pin(GEMMA4_VOCAB, soft_cap=GEMMA4_SOFT_CAP),
        _build_gemma4_mtp(8, 8, ordered=False),
        NO_CPU_BUILD + "as Gemma4MTP, but every centroid selected and the identity token ordering",
    ),
    "Gemma4MTP[dense]": Subject(
        "Gemma4MTP",
        f"{MODELS}.gemma4_mtp",
        head_pin(GEMMA4_VOCAB, soft_cap=GEMMA4_SOFT_CAP),
        _build_gemma4_mtp(None, 0, ordered=False),
        NO_CPU_BUILD + "as Gemma4MTP, without use_ordered_embeddings (no masked embedder)",
    ),
    "Gemma4DSparkForCausalLM": reproduced(
        "gemma4_dspark",
        "Gemma4DSparkForCausalLM",
        GEMMA4_VOCAB,
        None,
        "its Gemma4 DSpark layers need a Gemma4 target; ParallelLMHead(vocab_size), "
        "LogitsProcessor(vocab_size, soft_cap=final_logit_softcapping), no draft_id_to_target_id",
        soft_cap=GEMMA4_SOFT_CAP,
    ),
}
