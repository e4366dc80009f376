"""SGLang 0.5.23's Domino rollout past its first token (``domino_greedy_rollout``, ``sglang/srt/speculative/
domino_utils.py``), judged for agreement across ranks.

A Domino draft proposes a block: its first token is the argmax of the target head's logits (the same table of per-shard
maxima on every rank, :mod:`engines.sglang.subjects.dflash_draft`'s ``sglang_domino_first_ids``), each later one the
argmax of the gathered base logits plus a correction that replicated modules (a GRU over the tokens so far, a projector)
compute from the rank's own draft hidden states, with no collective and no broadcast after: where the ranks' copies
differ, so can their proposals.

``sglang_domino_second_token`` runs the rollout from the wheel's file (it imports torch alone) on a block of three
(the anchor and two proposals, both from the row's hidden state, the full-gather branch: no candidate pool) and
returns the second proposal.  Its modules make the correction the rank's own logit of each token: the projector's
first layer keeps the draft hidden state (the identity on it, zero on the GRU's state), its second is the identity,
its third the head's rows (gathered once: a replicated copy, as the projector is); the GRU and the embedding are
SGLang's modules at their seeded initial weights, which this correction does not read.  The tokens are not the
classic path's, so the subject is judged by ``test_ranks_agree`` alone (``fn.judged_only``).  The head pins
:mod:`engines.sglang.subjects.dflash_draft`'s (float32, integer weights, the bias one more feature).  The corrected twin
broadcasts rank 0's proposals.  Nothing of SGLang is copied here.
"""

from __future__ import annotations

from functools import cache

import torch
from torch import nn

from engines.sglang.subjects.dflash_draft import FILES, _check, _with_bias, judged_for_agreement, replicated_head
from engines.sglang.wheel import kernels
from engines.sglang.wheel.compiled import wheel_functions
from engines.sglang.wheel.runtime import Coordinator
from sharded.layout import ShardLayout

JUDGED_WHY = (
    "Domino's later tokens add a correction of its own to the head's logits: no classic path computes them, so only "
    "whether the ranks agree is judged"
)


def why_unavailable() -> str | None:
    """Why the rollout cannot run here, or None: the wheel alone (torch runs it, on any group)."""
    return kernels.wheel_missing({"domino": FILES["domino"]})


@cache
def _rollout():
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    path = kernels.kernel_paths({"domino": FILES["domino"]})["domino"]
    return wheel_functions("domino_rollout", path, None, {}).domino_greedy_rollout


def _second(hidden, weight, bias, layout: ShardLayout, scale, soft_cap, d2t, group) -> torch.Tensor:
    """Each row's second proposal on this rank (module docstring)."""
    _check(hidden, weight, layout, soft_cap, scale, d2t)
    if layout.added_vocab:
        raise ValueError("SGLang's Domino reads base rows only: no added vocabulary")
    hidden, weight = _with_bias(hidden, weight, bias)
    rows, features = hidden.shape
    replica = replicated_head(weight, layout, group)
    generator = torch.Generator().manual_seed(0)  # the GRU's and the embedding's weights: the same on every rank
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(2**31, (1,), generator=generator)))
        embedding, gru = nn.Embedding(layout.vocab, features), nn.GRU(features, features, batch_first=True)
    keep = nn.Linear(2 * features, features, bias=False)
    to_vocab = nn.Linear(features, layout.vocab, bias=False)
    with torch.no_grad():
        keep.weight.copy_(torch.cat([torch.eye(features), torch.zeros(features, features)], dim=1))
        to_vocab.weight.copy_(replica)
    proposals = _rollout()(
        draft_hidden=torch.stack([torch.zeros_like(hidden), hidden, hidden], dim=1),
        bonus_tokens=torch.zeros(rows, dtype=torch.long),
        target_embedding=embedding,
        lm_head_weight=weight,
        prefix_gru=gru,
        embed_proj=nn.Sequential(keep, nn.Identity(), to_vocab),
        vocab_size=layout.vocab,
        shift_label=False,
        candidate_pool_size=0,
        tp_group=Coordinator(group) if group.world_size > 1 else None,
        lm_head_org_vocab_start=layout.start,
        lm_head_num_org=layout.num_real,
        lm_head_num_org_padded=layout.size,
        in_cuda_graph=False,
    )
    return proposals[:, 1]


def sglang_domino_second_token(hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """``domino_greedy_rollout``'s second proposal (module docstring)."""
    return _second(hidden, weight, bias, layout, scale, soft_cap, d2t, group)


def sglang_domino_second_token_corrected(
    hidden, weight, bias, layout: ShardLayout, *, scale=1.0, soft_cap=None, d2t=None, group
):
    """The same rollout, rank 0's proposals broadcast to every rank (S9's correction)."""
    return group.all_gather(_second(hidden, weight, bias, layout, scale, soft_cap, d2t, group))[0]


judged_for_agreement(
    (sglang_domino_second_token, sglang_domino_second_token_corrected),
    why_unavailable,
    "SGLang's ParallelLMHead cuts even shards and Domino takes every row",
    JUDGED_WHY,
)
