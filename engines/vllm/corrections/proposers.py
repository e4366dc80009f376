"""The project's corrections of vLLM's V1 proposers where the switch meets their other features.

vLLM 0.32.0 and 0.33.0 (``vllm/v1/spec_decode/llm_base_proposer.py``, ``SpecDecodeBaseProposer._greedy_sample``)
return the draft model's ``get_top_tokens`` as soon as ``use_local_argmax_reduction`` is on, before the
``use_heterogeneous_vocab`` branch: the pick is taken over every draft word and sent to the target as a draft id.
The correction keeps the local path and adds the two steps the classic branch takes: the project's corrected local
argmax (:func:`engines.vllm.corrections.processor.get_top_tokens`) ranks only the ids whose words the target holds
(vLLM's own ``VocabMapping.intersection_mask_draft``), and ``VocabMapping.map_draft_to_target_ids`` maps the
winner.  Every other configuration runs vLLM's own method.  A release without the V1 proposer or without
heterogeneous vocabularies gets no patch (:data:`PATCHES` is empty there).

The refusal: ``DraftModelProposer``, ``Gemma4Proposer`` and ``Step3p5MTPProposer`` each keep their draft's own head by
overriding ``_maybe_share_lm_head``, the method in which the base class refuses the switch for a draft class without
``get_top_tokens``; :func:`refusing` keeps their sharing nothing and puts the refusal back.

vLLM is imported inside the functions: this module imports without it.
"""

from __future__ import annotations

from typing import Any

import torch

from engines.findings import Patch
from engines.vllm.corrections.processor import get_top_tokens
from engines.vllm.wheel.discovery import ships

_PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"
_TARGET = "vllm.v1.spec_decode.draft_model:DraftModelProposer._greedy_sample"  # it inherits the base's


def greedy_sample(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """``DraftModelProposer._greedy_sample`` (vLLM's only proposer that takes a vocabulary of its own), with the switch
    on and a vocabulary of its own: the local argmax over the shared words, mapped to the target's ids; vLLM's own
    method (the base class's) otherwise."""
    if self.use_local_argmax_reduction and getattr(self, "use_heterogeneous_vocab", False):
        mapping, model = self.vocab_mapping, self.model
        processor = model.logits_processor
        allowed = mapping.intersection_mask_draft
        picked = get_top_tokens(processor, model.lm_head, hidden_states, allowed=allowed)
        return mapping.map_draft_to_target_ids(picked)
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    return SpecDecodeBaseProposer._greedy_sample(self, hidden_states)


def refusing(self: Any, target_language_model: Any) -> None:
    """The ``_maybe_share_lm_head`` of a proposer that keeps its draft's own head: it shares nothing, as
    vLLM's does, and refuses the switch for a draft class without ``get_top_tokens``, naming the class, as the base
    class's load does."""
    if self.use_local_argmax_reduction and not hasattr(self.model, "get_top_tokens"):
        raise ValueError(
            f"use_local_argmax_reduction needs the draft model's get_top_tokens(), and {type(self.model).__name__} "
            "has none"
        )


# the proposers whose own _maybe_share_lm_head (sharing nothing) drops the base class's refusal, in 0.32.0
_KEEP_OWN_HEAD = {
    "draft_model": "DraftModelProposer",
    "gemma4": "Gemma4Proposer",
    "step3p5": "Step3p5MTPProposer",
}


PATCHES: tuple[Patch, ...] = (
    *((Patch(_TARGET, greedy_sample),) if ships(_PROPOSER, holding="use_heterogeneous_vocab") else ()),
    *(
        Patch(f"vllm.v1.spec_decode.{module}:{name}._maybe_share_lm_head", refusing)
        for module, name in _KEEP_OWN_HEAD.items()
        if ships(f"vllm.v1.spec_decode.{module}")
    ),
)
