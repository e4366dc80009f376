"""The project's corrections of vLLM's Gemma4 MTP head (causes V11, V12 and V13 of ``engines.vllm.causes.findings``).

- V11: ``Gemma4MTPMaskedEmbedder.get_top_tokens`` takes ``argmax`` over the candidates in the order the centroids
  were ranked, so a tie goes to the candidate of the best-scoring centroid, not to the lowest token id.  The
  correction picks, among the candidates that hold the row's maximum, the lowest id (the first NaN's id where a row
  has a NaN), as the classic path's ``argmax`` over the full vocabulary does.
- V13: the masked head never applies the final soft cap (and scale) that the class's own ``LogitsProcessor`` applies
  on its dense path, so it chooses among logits the cap would merge into ties.  The corrections apply the processor's
  cap and scale to the candidates' logits before choosing (``get_top_tokens``) or scattering (``compute_logits``).
- V12: ``Gemma4MTP.get_top_tokens`` asserts a masked embedder.  Without one the head is the class's dense
  ``ParallelLMHead`` with its ``LogitsProcessor``, exactly the pair ``LocalArgmaxMixin`` serves, so the correction
  takes that exact vocab-parallel argmax (``LogitsProcessor.get_top_tokens``) instead of failing.

Everything here imports without vLLM; vLLM's classes are only named in :data:`PATCHES`.
"""

from __future__ import annotations

from typing import Any

import torch

from engines.findings import Patch

_MODULE = "vllm.model_executor.models.gemma4_mtp"


def lowest_id_at_max(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Per row, the lowest of ``ids`` whose logit is the row's maximum: what ``argmax`` over the whole vocabulary
    returns, whatever order the candidates come in.  A NaN counts as the maximum (the lowest NaN id wins), and
    -0.0 ties with +0.0, as they do for ``argmax``."""
    nan = logits.isnan()
    best = torch.where(nan.any(dim=-1, keepdim=True), nan, logits == logits.amax(dim=-1, keepdim=True))
    never = torch.iinfo(ids.dtype).max  # no id: loses every min
    return torch.where(best, ids, torch.full_like(ids, never)).amin(dim=-1)


def _as_the_head_would(processor: Any, logits: torch.Tensor) -> torch.Tensor:
    """The soft cap, then the scale, in the order ``LogitsProcessor.forward`` applies them to full logits."""
    if processor is None:
        return logits
    if processor.soft_cap is not None:
        logits = torch.tanh(logits / processor.soft_cap) * processor.soft_cap
    if processor.scale != 1.0:
        logits = logits * processor.scale
    return logits


def masked_top_tokens(
    self: Any, hidden_states: torch.Tensor, lm_head_weight: torch.Tensor, logits_processor: Any = None
) -> torch.Tensor:
    """``Gemma4MTPMaskedEmbedder.get_top_tokens``, ties to the lowest id (V11).  ``logits_processor``: the head's
    processor, whose cap and scale the candidates get before the choice (V13); the original's callers, which pass
    none, keep the original's uncapped logits."""
    logits, ids = self._select_and_score(hidden_states, lm_head_weight)
    return lowest_id_at_max(_as_the_head_would(logits_processor, logits), ids)


def gemma4_top_tokens(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """``Gemma4MTP.get_top_tokens``: the masked argmax on the head's capped logits (V11, V13), or, with no masked
    embedder, the exact vocab-parallel argmax of the dense head (V12)."""
    if self.masked_embedding is None:
        return self.logits_processor.get_top_tokens(self.lm_head, hidden_states)
    return self.masked_embedding.get_top_tokens(hidden_states, self._get_full_lm_head_weight(), self.logits_processor)


def gemma4_logits(self: Any, hidden_states: torch.Tensor, spec_step_idx: int = 0) -> torch.Tensor | None:
    """``Gemma4MTP.compute_logits``: the masked head's candidates get the processor's cap and scale (V13) before they
    are scattered into a full row; the tokens outside the selected centroids stay at the dtype's lowest value, as
    in the original (capping that value would raise it to ``-soft_cap``, level with real logits)."""
    masked = self.masked_embedding
    if masked is None:
        logits = self.logits_processor(self.lm_head, hidden_states)
    else:
        chosen, ids = masked._select_and_score(hidden_states, self._get_full_lm_head_weight())
        chosen = _as_the_head_would(self.logits_processor, chosen)
        lowest = torch.finfo(chosen.dtype).min
        logits = chosen.new_full((hidden_states.shape[0], masked.vocab_size), lowest).scatter_(-1, ids, chosen)
    if logits is not None and self._suppress_idx is not None:
        logits.index_fill_(1, self._suppress_idx, -float("inf"))
    return logits


PATCHES: tuple[Patch, ...] = (
    Patch(f"{_MODULE}:Gemma4MTPMaskedEmbedder.get_top_tokens", masked_top_tokens),
    Patch(f"{_MODULE}:Gemma4MTP.get_top_tokens", gemma4_top_tokens),
    Patch(f"{_MODULE}:Gemma4MTP.compute_logits", gemma4_logits),
)
