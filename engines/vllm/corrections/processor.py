"""The project's corrections of vLLM's ``LogitsProcessor`` (causes V1 to V10 of ``engines.vllm.causes.findings``).

Three methods replace vLLM's, with vLLM's signatures (``self`` is the ``LogitsProcessor``):

- :func:`get_top_tokens` and :func:`get_top_k_tokens`: each rank ranks only the shard's *token* columns, by their
  real global ids (the head's ``shard_indices``: base rows, then added rows after the base padding), below the
  processor's logits vocabulary; soft cap and scale come first, over the whole shard, exactly as on the classic
  path; the order is the classic path's (NaN first, then larger values, equal values by the smaller id, ``-0.0``
  tying ``+0.0``), settled by distinct int64 keys rather than by ``torch.topk``'s handling of ties; the ranks
  exchange (value, id) candidates as float32 with each id split into two exact halves (no int64 collective, no
  id rounded at 2**24).  A rank with fewer than k tokens fills its slots with a candidate that loses every tie.
- :func:`_get_logits`: after the gather, the columns are put in id order before the logits vocabulary is kept.

With ``return_log_probs`` the log-partition is combined across ranks as ``log_softmax`` computes it, shifted by the
row's largest logit (:func:`_log_partition`), not as a ``logsumexp`` of ranks' ``logsumexp`` values.

vLLM is imported inside the functions: this module imports without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from engines.findings import Patch

_LP = "vllm.model_executor.layers.logits_processor:LogitsProcessor"
_NO_ID = 2**32 - 1  # a missing candidate's id: above every real id (a vocabulary stays below 2**32 - 1)
_HALF = 2**24  # an id travels as id // 2**24 and id % 2**24, two float32 values that hold it exactly
_NAN_BITS = 0x7FC00000  # every NaN ranks as this one, one step above +inf
_SIGN_FREE = 0x7FFFFFFF


def _check_scale(scale: float) -> None:
    """The local reductions rank scaled logits; a non-positive scale would reverse or flatten that order."""
    if scale <= 0.0:
        raise ValueError(f"the vocab-parallel local reductions need a positive logit scaling factor, got {scale}")


def _token_columns(logits_vocab: int, lm_head: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This shard's token columns and their global ids, both ascending.

    A shard is ``[base rows | base padding | added rows | added padding]`` (the head's ``shard_indices``); only the
    base rows take their id from ``org_vocab_start_index``.
    """
    shard = lm_head.shard_indices
    base = torch.arange(shard.num_org_elements, device=device)
    added = torch.arange(shard.num_added_elements, device=device)
    # V1: an added row's id counts from added_vocab_start_index, and the row sits after the whole padded base block
    columns = torch.cat([base, added + shard.num_org_elements_padded])
    ids = torch.cat([base + shard.org_vocab_start_index, added + shard.added_vocab_start_index])
    # V3: ids at or past the processor's logits vocabulary are head rows, not tokens (InklingMTP's 1000 of 1024)
    keep = ids < logits_vocab
    return columns[keep], ids[keep]


def _token_logits(
    processor: Any, lm_head: Any, hidden_states: torch.Tensor, embedding_bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, n]`` logits of this shard's tokens (soft cap, then scale, as ``forward`` does) and their ``[n]`` ids."""
    logits = processor._apply_head(lm_head, hidden_states, embedding_bias)
    # V7, V8: cap and scale every logit before anything is selected, in the classic path's order (cap, then scale)
    if processor.soft_cap is not None:
        logits = torch.tanh(logits / processor.soft_cap) * processor.soft_cap
    if processor.scale != 1.0:
        logits = logits * processor.scale
    # V1, V3, V6: only token columns take part; padding is left out, not set to a -inf that ties with real logits
    columns, ids = _token_columns(processor.org_vocab_size, lm_head, logits.device)
    return logits.index_select(-1, columns), ids


def _order_keys(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """int64 keys, larger first in the classic order: NaN, then larger values, then (equal values) the smaller id.

    The high half is the float32 value's bits made order-preserving as signed integers (``-0.0`` as ``+0.0``,
    every NaN as one value above ``+inf``); the low half is ``2**32 - 1 - id``.  Distinct ids give distinct keys,
    so a ``topk`` over them has no tie to settle: its result is unique, on any device and kernel.
    """
    v = values.float()
    v = torch.where(v == 0, 0.0, v).contiguous()
    bits = v.view(torch.int32).to(torch.int64)
    bits = torch.where(v.isnan(), _NAN_BITS, bits)
    ordered = torch.where(bits < 0, bits ^ _SIGN_FREE, bits)
    return (ordered << 32) | (_NO_ID - ids.to(torch.int64))


def _best(values: torch.Tensor, ids: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first k of ``values [B, n]`` (ids ``[n]`` or ``[B, n]``) in the classic order: float32 values, int64 ids.

    Fewer than k columns: the rest is value ``-inf``, id :data:`_NO_ID`, which every real candidate beats.
    """
    ids = ids.expand_as(values)
    take = min(k, values.shape[-1])
    picked = _order_keys(values, ids).topk(take, dim=-1).indices  # V5: ties settled by id, not by topk
    top_values, top_ids = values.gather(-1, picked).float(), ids.gather(-1, picked).to(torch.int64)
    if take < k:
        fill = (values.shape[0], k - take)
        top_values = torch.cat([top_values, top_values.new_full(fill, -torch.inf)], dim=-1)
        top_ids = torch.cat([top_ids, top_ids.new_full(fill, _NO_ID)], dim=-1)
    return top_values, top_ids


def _merge(values: torch.Tensor, ids: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The group's first k from every rank's :func:`_best`: one all-gather of float32 ``[3, B, k]``.

    Values are float32 (which holds every bf16 and fp16 logit); each id is two float32 halves below 2**24, so it
    arrives exact (V4) and no int64 tensor is all-gathered (V10: vLLM's shared-memory CPU all-gather has no int64
    kernel).  Every rank merges the same candidates the same way, so all return the same answer.
    """
    from vllm.distributed import tensor_model_parallel_all_gather

    wire = torch.stack([values, (ids // _HALF).float(), (ids % _HALF).float()])
    got = tensor_model_parallel_all_gather(wire, dim=-1)  # [3, B, tp * k]
    cand_ids = got[1].to(torch.int64) * _HALF + got[2].to(torch.int64)
    return _best(got[0], cand_ids, k)


def get_top_tokens(
    self: Any,
    lm_head: Any,
    hidden_states: torch.Tensor,
    embedding_bias: torch.Tensor | None = None,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Vocab-parallel argmax, int64 ``[B]``: the classic path's token, with one all-gather of ``[3, B]`` floats.
    ``transform``: an element-wise function a model applies to the processor's logits before its classic argmax
    (MuseSpark's output transform), applied to each shard's token logits before they are ranked.  ``allowed``: a
    ``[logits vocab]`` mask of the ids a caller keeps (a draft's words the target shares); the rest count as
    ``-inf``, as a classic path that masks them before its argmax counts them."""
    _check_scale(self.scale)
    values, ids = _token_logits(self, lm_head, hidden_states, embedding_bias)
    values = values if transform is None else transform(values)
    if allowed is not None:
        values = values.masked_fill(~allowed.to(values.device)[ids], -torch.inf)
    top_values, top_ids = _best(values, ids, 1)
    if lm_head.tp_size > 1:
        top_values, top_ids = _merge(top_values, top_ids, 1)
    return top_ids[:, 0]


def get_top_k_tokens(
    self: Any,
    lm_head: Any,
    hidden_states: torch.Tensor,
    k: int,
    embedding_bias: torch.Tensor | None = None,
    *,
    return_log_probs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Vocab-parallel top-k: int64 ids ``[B, k]`` in the classic order, and their float32 logits (or log-probs)."""
    _check_scale(self.scale)
    # V9: k above the logits vocabulary has no answer (it would be filled with padding ids)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.org_vocab_size:
        raise ValueError(f"k={k!r} must be an int from 1 to the logits vocabulary of {self.org_vocab_size} ids")
    values, ids = _token_logits(self, lm_head, hidden_states, embedding_bias)
    top_values, top_ids = _best(values, ids, k)
    if lm_head.tp_size > 1:
        top_values, top_ids = _merge(top_values, top_ids, k)
    if not return_log_probs:
        return top_ids, top_values  # V7: already capped, then scaled, like every classic logit
    shift, log_sum = _log_partition(values, lm_head.tp_size)  # tokens only (V1, V3)
    return top_ids, (top_values - shift) - log_sum


def _log_partition(values: torch.Tensor, tp_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-partition of the tokens' logits over all ranks as ``shift + log_sum`` (``[B, 1]`` each, float32).

    A log-probability is then ``(value - shift) - log_sum``, as ``log_softmax`` (the classic path's) computes it:
    ``shift`` is the row's largest finite logit, so no step rounds at the logits' magnitude.  vLLM adds ranks'
    ``logsumexp`` results with another ``logsumexp`` and subtracts that from the value: each step rounds to the
    largest logit's precision (an ulp of 512 is 6e-5), which the classic path never does.  Infinite and NaN
    maxima shift by 0, as ``torch.logsumexp`` does, so such rows give its infinities and NaNs.
    """
    x = values.float()
    if x.shape[-1]:
        peak = x.amax(dim=-1, keepdim=True)
        local_shift = torch.where(peak.isfinite(), peak, 0.0)
        total = (x - local_shift).exp().sum(dim=-1, keepdim=True)
    else:  # a rank without tokens adds nothing
        peak = x.new_full((x.shape[0], 1), -torch.inf)
        local_shift, total = torch.zeros_like(peak), torch.zeros_like(peak)
    if tp_size > 1:
        from vllm.distributed import tensor_model_parallel_all_gather

        peak, local_shift, total = tensor_model_parallel_all_gather(torch.stack([peak, local_shift, total]), dim=-1)
    row_peak = peak.amax(dim=-1, keepdim=True)
    shift = torch.where(row_peak.isfinite(), row_peak, 0.0)
    # each rank's sum, moved from its own shift to the row's; a rank that adds nothing stays 0 (never 0 * inf)
    scaled = torch.where(total == 0, 0.0, total * (local_shift - shift).exp())
    return shift, scaled.sum(dim=-1, keepdim=True).log()


def _id_columns(lm_head: Any, count: int, device: torch.device) -> torch.Tensor:
    """The column of each id ``0 .. count-1`` in the gathered logits (rank blocks of ``[base | pad | added | pad]``).

    The same columns as ``lm_head.get_sharded_to_full_mapping()``, from the head's sizes, without a Python list.
    """
    tp, org = lm_head.tp_size, lm_head.org_vocab_size
    base_rows = lm_head.org_vocab_size_padded // tp
    added_rows = (lm_head.num_embeddings_padded - lm_head.org_vocab_size_padded) // tp
    ids = torch.arange(count, device=device)
    base = ids < org
    added = (ids - org).clamp(min=0)
    rank = torch.where(base, ids // base_rows, added // max(added_rows, 1))
    row = torch.where(base, ids - rank * base_rows, base_rows + added - rank * added_rows)
    return rank * lm_head.num_embeddings_per_partition + row


def _get_logits(
    self: Any,
    hidden_states: torch.Tensor,
    lm_head: Any,
    embedding_bias: torch.Tensor | None,
    skip_gather: bool = False,
) -> torch.Tensor | None:
    """The classic path's logits of the logits vocabulary, by id (None off rank 0 when it gathers to rank 0)."""
    logits = self._apply_head(lm_head, hidden_states, embedding_bias)
    if skip_gather:
        return logits
    if lm_head.tp_size > 1:
        logits = self._gather_logits(logits)
    if logits is None:
        return None
    if lm_head.num_added_embeddings > 0:
        # V2: with added rows the gathered columns are in shard order, not id order: pick each id's column
        return logits.index_select(-1, _id_columns(lm_head, self.org_vocab_size, logits.device))
    return logits[..., : self.org_vocab_size]


PATCHES: tuple[Patch, ...] = (
    Patch(f"{_LP}.get_top_tokens", get_top_tokens),
    Patch(f"{_LP}.get_top_k_tokens", get_top_k_tokens),
    Patch(f"{_LP}._get_logits", _get_logits),
)
