"""Broken local paths the project's tests plant in every worker of a running vLLM engine (``tpargmax_plant``).

Each entry of :data:`PLANTS` gives ``(owner, attribute, replacement)``; the worker probe swaps it in and puts the
original back when asked.  Each carries one real bug of the local path, written here from what the path does (a
local argmax per shard, its padding masked, one (value, id) pair per rank gathered, the winner's id mapped through
``d2t``), not copied from vLLM; the engine's classic path (the switch off) is left alone.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _local_argmax(
    offset: bool = True,
    last_rank_wins_ties: bool = False,
    mask: float | None = float("-inf"),
    carry_in_logits=False,
    values_in: torch.dtype | None = None,
) -> Callable[..., torch.Tensor]:
    """``LogitsProcessor.get_top_tokens`` with one departure: the rank's id offset left out, ties given to the last
    rank, the padding left unmasked (``mask`` None) or masked with NaN (which wins every argmax), the pairs
    carried in the logits' dtype instead of float32 (bfloat16 holds integers exactly only up to 256), or the values
    alone carried in ``values_in`` (a float32 head's maxima a few ulps apart then tie)."""
    from vllm.distributed import tensor_model_parallel_all_gather

    def get_top_tokens(self, lm_head, hidden_states, embedding_bias=None):
        logits = self._apply_head(lm_head, hidden_states, embedding_bias)
        if self.soft_cap is not None:
            logits = torch.tanh(logits / self.soft_cap) * self.soft_cap
        logits = logits * self.scale
        padding = lm_head.shard_indices.num_org_vocab_padding
        if padding and mask is not None:
            logits[:, -padding:] = mask
        value, index = logits.max(dim=-1)
        if offset:
            index = index + lm_head.shard_indices.org_vocab_start_index
        if lm_head.tp_size == 1:
            return index
        carried = logits.dtype if carry_in_logits else torch.float32
        pairs = torch.stack([value.to(carried), index.to(carried)], dim=-1)
        pairs = tensor_model_parallel_all_gather(pairs, dim=-1).view(len(hidden_states), lm_head.tp_size, 2)
        values = pairs[..., 0] if values_in is None else pairs[..., 0].to(values_in)
        if last_rank_wins_ties:
            rank = lm_head.tp_size - 1 - values.flip(-1).argmax(dim=-1)
        else:
            rank = values.argmax(dim=-1)
        return pairs[..., 1].gather(-1, rank[:, None]).squeeze(-1).to(torch.int64)

    return get_top_tokens


def _d2t_twice(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """``LocalArgmaxMixin.get_top_tokens`` mapping the winner through ``d2t`` twice where the table reaches."""
    top = self.logits_processor.get_top_tokens(self.lm_head, hidden_states)
    d2t = getattr(self, "draft_id_to_target_id", None)
    if d2t is None:
        return top
    once = top + d2t[top]
    return torch.where(once < len(d2t), once + d2t[once.clamp(max=len(d2t) - 1)], once)


def _past_every_vocabulary(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``LocalArgmaxMixin.get_top_tokens`` (above ``LogitsProcessor``, after ``d2t``) returning an id no vocabulary
    holds: its token plus 2**20, which vLLM cannot embed or verify."""

    def get_top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return original(self, hidden_states) + 2**20

    return get_top_tokens


def _mapped_unconstrained(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """A draft with a vocabulary of its own, the switch on: the local argmax over every draft word (the constraint to
    the shared words left out), then mapped to the target's ids."""
    return self.vocab_mapping.map_draft_to_target_ids(self.model.get_top_tokens(hidden_states))


def _draft_model_proposer():
    from vllm.v1.spec_decode.draft_model import DraftModelProposer

    return DraftModelProposer


def _corrected_greedy_sample():
    from engines.vllm.corrections.proposers import greedy_sample

    return greedy_sample


def _processor():
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    return LogitsProcessor


def _mixin():
    from vllm.model_executor.models.interfaces import LocalArgmaxMixin

    return LocalArgmaxMixin


PLANTS: dict[str, Callable[[], tuple[type, str, Callable[..., torch.Tensor]]]] = {
    "ids_without_rank_offset": lambda: (_processor(), "get_top_tokens", _local_argmax(offset=False)),
    "ties_to_highest_rank": lambda: (_processor(), "get_top_tokens", _local_argmax(last_rank_wins_ties=True)),
    "d2t_applied_twice": lambda: (_mixin(), "get_top_tokens", _d2t_twice),
    "padding_unmasked": lambda: (_processor(), "get_top_tokens", _local_argmax(mask=None)),
    "padding_masked_with_nan": lambda: (_processor(), "get_top_tokens", _local_argmax(mask=float("nan"))),
    "ids_in_logits_dtype": lambda: (_processor(), "get_top_tokens", _local_argmax(carry_in_logits=True)),
    "values_in_bfloat16": lambda: (_processor(), "get_top_tokens", _local_argmax(values_in=torch.bfloat16)),
    "id_past_every_vocabulary": lambda: (_mixin(), "get_top_tokens", _past_every_vocabulary(_mixin().get_top_tokens)),
    "own_words_unconstrained": lambda: (_draft_model_proposer(), "_greedy_sample", _mapped_unconstrained),
    # not a bug: the project's correction (engines.vllm.corrections.proposers), shown passing where vLLM fails
    "own_words_corrected": lambda: (_draft_model_proposer(), "_greedy_sample", _corrected_greedy_sample()),
}
