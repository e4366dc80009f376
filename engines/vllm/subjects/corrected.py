"""vLLM's subjects with the project's corrections in place: the same code under test, each defect replaced.

``engines.vllm.corrected:vllm`` (and ``vllm_classic``, ``vllm_topk``, ``vllm_topk_logprobs``) is the layer subject of
the same name; ``engines.vllm.corrected:NAME.PATH`` is the model subject ``engines.vllm.models:NAME.PATH`` (the names
the pages record, :data:`SPEC`: ``sharded.impls.MOVED`` finds them here).  During each call every correction
(:data:`PATCHES`, from :mod:`engines.vllm.corrections.processor` and :mod:`engines.vllm.corrections.gemma4`) replaces
the method it corrects, and the original is back after it, so a rank process that also runs the original subject never
sees a correction.  The page shows each corrected row beside its original.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from engines.findings import corrected
from engines.vllm.corrections import gemma4 as fixes_gemma4
from engines.vllm.corrections import muse_spark as fixes_muse_spark
from engines.vllm.corrections import processor as fixes
from engines.vllm.corrections import proposers as fixes_proposers
from engines.vllm.corrections import speculators as fixes_speculators
from engines.vllm.subjects import layer, models, speculators

# each release's classes get their corrections: a patch of a class the installed release lacks could not be put
SPEC = "engines.vllm.corrected"
PATCHES = (
    *fixes.PATCHES,
    *fixes_gemma4.PATCHES,
    *(p for name in fixes_muse_spark.NAMES if name in models.SUBJECTS for p in fixes_muse_spark.patches(name)),
    *fixes_speculators.PATCHES,
    *fixes_proposers.PATCHES,
)
LAYER = {
    "vllm": layer.vllm_local_argmax,
    "vllm_classic": layer.vllm_classic,
    "vllm_topk": layer.vllm_top_k,
    "vllm_topk_logprobs": layer.vllm_top_k_log_probs,
}
# the model subjects whose originals fail: the rows the page shows corrected (those of the installed release's classes)
_FAILING = (
    "Gemma4MTP.get_top_tokens",
    "Gemma4MTP[all_centroids].get_top_tokens",
    "Gemma4MTP[all_centroids].compute_logits",
    "Gemma4MTP[dense].get_top_tokens",
    "InklingMTP.get_top_tokens",
    "InklingMTP[amd].get_top_tokens",
    "DFlash2Qwen3ForCausalLM.get_top_k_tokens",
    "LiLiCorrForCausalLM.get_top_k_tokens",
    "MuseSpark1xForCausalLM.get_top_tokens",
    "MuseSpark1xForCausalLM[amd].get_top_tokens",
    "MuseSparkForCausalLM.get_top_tokens",
    "MuseSparkForCausalLM[amd].get_top_tokens",
    "DFlash2BeamForCausalLM.get_top_k_tokens",
)
MODELS = tuple(name for name in _FAILING if name.rpartition(".")[0] in models.SUBJECTS)


def specs() -> list[str]:
    """Every corrected subject's ``--impl`` spec: the layer's, the failing model subjects', every speculator's."""
    return [f"{SPEC}:{name}" for name in (*LAYER, *MODELS, *_speculators())]


def _speculators() -> list[str]:
    """The speculator subjects (``engines.vllm.subjects.speculators``), by the name after the module's colon."""
    return [spec.partition(":")[2] for spec in speculators.specs()] if layer.vllm_available() else []


@cache
def _subject(attr: str) -> Callable[..., Any]:
    original = LAYER.get(attr) or (getattr(models, attr) if attr in MODELS else getattr(speculators, attr))
    return corrected(original, PATCHES, f"{attr} (corrected)")


def __getattr__(attr: str) -> Callable[..., Any]:
    if attr in LAYER or attr in MODELS or attr in _speculators():
        return _subject(attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r} (offered: {', '.join(specs())})")
