"""The classic path's answer to one case: every wing asks here, and nowhere else, what the oracle says.

An :class:`Answer` computes each part (draft logits, target logits, tokens, top k) on first use and keeps it, so a
check, the diagnosis it hands the answer to and the statistics never compute one twice.  It gets the head's sizes
from the case, never the layouts, and places rows by its own derivation (``reference``).
"""

from __future__ import annotations

from functools import cached_property

import torch

from properties.cases.case import Inputs
from reference.oracle import draft_logits, tokens_from_draft_logits
from reference.sampling import target_logits
from reference.topk import classic_top_k


class Answer:
    """The oracle's answer to ``inputs``; its tensors are shared by every caller, so never written to."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs

    @cached_property
    def draft_logits(self) -> torch.Tensor:
        """``[B, vocab]`` logits of the token ids, after soft cap and scale."""
        return self._draft_logits(raw=False)

    @cached_property
    def raw_logits(self) -> torch.Tensor:
        """The draft logits before soft cap and scale, in the head's dtype (for diagnosis)."""
        return self._draft_logits(raw=True)

    @cached_property
    def tokens(self) -> torch.Tensor:
        """The classic path's tokens ``[B]``: the argmax through the d2t scatter."""
        return tokens_from_draft_logits(self.draft_logits, self.inputs.d2t, self.inputs.target_vocab)

    @cached_property
    def target_logits(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits by target id on the CPU (with d2t: scattered, ``-inf`` where no draft id maps), and which
        targets some draft id maps to: the row the classic sampler draws from."""
        d2t = None if self.inputs.d2t is None else self.inputs.d2t.cpu()
        return target_logits(self.draft_logits.cpu(), d2t, self.inputs.target_vocab)

    def top_k(self, k: int, *, mapped_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The classic path's top k (through the d2t scatter): target ids ``[B, k]`` and their logits;
        ``mapped_only``: the named divergence's side, where ``-inf`` slots take mapped targets only."""
        inputs = self.inputs
        return classic_top_k(self.draft_logits, k, inputs.d2t, inputs.target_vocab, mapped_only=mapped_only)

    def _draft_logits(self, raw: bool) -> torch.Tensor:
        inputs, case = self.inputs, self.inputs.case
        return draft_logits(
            list(inputs.rank_hidden) if case.rank_ulps else inputs.hidden,
            [inputs.weight_shard(r) for r in range(inputs.tp)],
            None if inputs.bias is None else [inputs.bias_shard(r) for r in range(inputs.tp)],
            vocab=inputs.vocab,
            org_vocab=case.vocab,
            added_vocab=case.added,
            padding_size=case.padding_size,
            scale=1.0 if raw else case.scale,
            soft_cap=None if raw else case.soft_cap,
            widths=inputs.layouts[0].widths or None,
        )


def answer(inputs: Inputs) -> Answer:
    """The oracle's answer to ``inputs``, made once per Inputs."""
    if "answer" not in inputs.memo:
        inputs.memo["answer"] = Answer(inputs)
    return inputs.memo["answer"]
