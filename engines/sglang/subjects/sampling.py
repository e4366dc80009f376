"""SGLang 0.5.23's candidate top-k (DFlash2) and its seeded sampler, as subjects of the sampling properties.

SGLang's functions run from the installed ``sglang`` wheel's own files; no SGLang line is copied here.  Every
module that defines them starts with ``from sglang...`` imports, and ``import sglang`` needs SGLang's dependencies
(``orjson`` first: ``ModuleNotFoundError: No module named 'orjson'`` for ``srt/layers/sampler.py``,
``srt/models/dflash.py`` and ``kernels/ops/speculative/lilicorr.py`` alike).  So :func:`wheel_functions` parses a
wheel file, keeps the named top-level functions (and its non-SGLang imports), compiles them under the file's own
path and line numbers (Triton's JIT and tracebacks read the real file), and runs them in a namespace where each
SGLang name they use is given below.  Decorators are kept, but for ``@torch.compile`` (eager here).

What runs, by file (``sglang/`` in the wheel):

* ``kernels/ops/speculative/lilicorr.py``: the whole module but its one SGLang import (``selector_walk_triton``,
  used by ``lilicorr_sample_path`` only), so ``lilicorr_topk_lse`` (L112-169) with its Triton kernels
  ``_tiled_scan`` / ``_tiled_select`` and ``_combine_lse`` (L96-99), and ``_topk_lse_torch`` (L102-109).
  ``lilicorr_topk_lse`` runs its kernels only for CUDA tensors (L117); under Triton's interpreter the rank's CPU
  logits are handed over as ``engines.sglang.wheel.runtime._InterpretedCuda`` (a CPU tensor whose ``is_cuda`` is
  True), so the kernel path runs there too, with the same routing (L124: ``min(K, T)`` not a power of two ->
  ``_topk_lse_torch``).
* ``srt/models/dflash.py``: ``_radix_topk`` (L66-70, ``flashinfer`` absent -> ``torch.topk``),
  ``_project_candidate_logits`` (L91-104) and ``candidate_topk`` (L107-154), called with ``with_partition=True``.
* ``kernels/ops/sampling/murmur_hash.py``: the module (only torch and Triton), its kernel ``murmur_hash32_kernel``.
* ``srt/layers/sampler.py``: ``multinomial_with_seed`` (L933-975, ``@torch.compile`` dropped),
  ``top_k_top_p_min_p_sampling_from_probs_torch`` (L785-858) and ``sampling_from_probs_torch`` (L978-1004).

The names SGLang's functions find here instead of SGLang's (glue, restated):

1. ``get_parallel().tp_size`` is the group's ``world_size``; ``tensor_model_parallel_all_gather(t, dim=-1)``
   concatenates every rank's ``t`` along ``dim`` in rank order (``group.all_gather`` stacked, then ``cat``).
2. ``lm_head``: ``weight`` is the rank's shard; ``org_vocab_size`` and ``shard_indices.num_org_elements`` /
   ``org_vocab_start_index`` are the layout's ``vocab``, ``num_real`` and ``start`` (every base id a token).
   ``should_apply_lm_head_quant_method`` is true only for a head with a ``quant_method`` (SGLang's first test,
   ``logits_processor.py`` L1599-1605), ``is_dense_head_weight`` is ``dflash_utils.py`` L817-824 (fp16, bf16,
   fp32).  Without a bias the head is dense (``torch.matmul(hidden, weight[:num_org].T)``, dflash.py L98-99).
   With a bias -- the suite plants NaN and infinities through it -- the head carries a quant method whose
   ``apply`` is ``F.linear(x, weight, bias)`` (``UnquantizedEmbeddingMethod.apply``'s body, with the planted
   bias), so SGLang's quantized-head branch runs (L100-104: padding rows masked to ``-inf``).
3. ``murmur_hash32(seed, positions, cols)``: on CPU SGLang calls ``sgl_kernel``'s ``murmur_hash32_cpu``, which is
   not in the wheel; here murmur_hash.py L119-128 (the Triton launch) runs on every device, under the
   interpreter on CPU.  ``positions`` is 0 for every row (the contract has no positions).

The glue of the subjects (ours, not SGLang's):

* ``k``: :func:`candidate_topk` takes one k per batch; it is the largest top-k of the batch's candidate rows
  (1 when there are none).  A row is a *candidate row* when it is greedy or its top-k is on (``0 < k < V``) and
  ``k`` is at most 16 (SGLang's K is a config value of at most ``MAX_FUSED_CANDIDATE_TOPK``, lilicorr.py L18) and
  fits every rank's shard (``torch.topk`` on a shard of fewer tokens raises).  The other rows **fall back** to
  the gathered logits, and their note says so: :func:`sglang_candidate_topk` draws them with the classic
  sampler, the seeded subject with SGLang's own sampler over the full vocabulary (``Sampler.forward``:
  ``logits / T``, ``softmax``, then ``sampling_from_probs_torch`` when no row of them has a top-k, else
  ``top_k_top_p_min_p_sampling_from_probs_torch`` with ``top_k`` ``TOP_K_ALL`` where off).
* a candidate row keeps the first ``top_k`` of the k candidates (a greedy row the first): ``candidate_topk``
  returns them in descending order, and DFlash2 draws from its K candidates alone.
* :func:`sglang_candidate_topk` draws ``argmax(x + gumbel_noise(seed, id))`` over the kept candidates (the
  contract's draw, first maximum by id), ``x = val / T``; the raw log-prob is ``val - lse`` (the normaliser
  ``candidate_topk`` returns), the processed one ``log_softmax`` of the kept ``x`` in float64.
* :func:`sglang_candidate_topk_seeded` hands ``softmax(vals / T)`` over the candidates to
  ``top_k_top_p_min_p_sampling_from_probs_torch`` with the rows' top-k (``top_p`` 1, no min-p), SGLang's seed,
  position 0; a greedy row is SGLang's greedy request (``sampling_params.py`` L245-248: temperature 1, top-k 1).
  The index it returns is a candidate column, mapped to the candidate's id.  Its noise is keyed by the column of
  the **sorted** probabilities (sampler.py L826 then L954-958), i.e. by sort rank; ``fn.noise`` declares the noise
  ``multinomial_with_seed`` would give the token if the column were its id.

Neither subject takes top-p (``fn.masks = ("top_k",)``): SGLang's candidate path has none.  The head is pinned
(:data:`HEAD`): no soft cap or scale (DFlash2 caps the candidates' values after the top-k), no added ids, no d2t.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from engines.sglang.wheel.runtime import RANK, load, why_unavailable
from reference.checks import InvalidInput
from reference.sampling import SamplingParams, gumbel_noise, scaled
from sharded.group import TPGroup, gathered
from sharded.keys import encode_keys
from sharded.layout import ShardLayout, every_rank
from sharded.local_sampling import gathered_sample, sampler, shard_tokens
from sharded.triton_env import on_kernel_device

__all__ = [
    "sglang_candidate_topk",
    "sglang_candidate_topk_corrected",
    "sglang_candidate_topk_seeded",
    "sglang_murmur_noise",
    "why_unavailable",
]

TOP_K_ALL = 1 << 30  # sglang/srt/sampling/sampling_params.py L43
MAX_FUSED_CANDIDATE_TOPK = 16  # lilicorr.py L18: "the config refuses a wider head"
FALLBACK = "fallback: top-k off, above 16 or above a rank's tokens: SGLang's candidate_topk never takes the row"
HEAD: dict[str, object] = {"added": 0, "logits_vocab": None, "soft_cap": None, "scale": 1.0, "d2t": "none"}


def _start(group: Any) -> None:
    load()


class _ShardIndices:
    def __init__(self, layout: ShardLayout) -> None:
        self.num_org_elements = layout.num_real
        self.org_vocab_start_index = layout.start


class _LinearMethod:
    """A head's ``quant_method`` whose ``apply`` is ``F.linear(x, weight, bias)`` with the planted bias."""

    def __init__(self, bias: torch.Tensor) -> None:
        self.bias = bias

    def apply(self, layer: Any, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(x, layer.weight, self.bias)


class _Head:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, layout: ShardLayout) -> None:
        self.weight = weight
        self.org_vocab_size = layout.vocab
        self.shard_indices = _ShardIndices(layout)
        if bias is not None:
            self.quant_method = _LinearMethod(bias)


def sglang_murmur_noise(seeds: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """float32 ``[B, n]``: the Gumbel noise ``multinomial_with_seed`` adds at column ``id``, position 0 (L954-970),
    rounded once to float32.  SGLang adds it in float64."""
    sglang, device = load(), ids.device
    seeds, ids = on_kernel_device(seeds), on_kernel_device(ids)  # the oracle's, on the CPU
    seed, positions = seeds.to(torch.uint64), torch.zeros_like(seeds)
    if ids.ndim == 1:  # murmur_hash32 takes one column vector for every row
        hashed = sglang.murmur_hash32(seed, positions, ids.contiguous())
    else:
        rows = [
            sglang.murmur_hash32(seed[r : r + 1], positions[r : r + 1], ids[r].contiguous()) for r in range(len(ids))
        ]
        hashed = torch.cat(rows)
    x = hashed.to(torch.float64) / torch.iinfo(torch.uint32).max
    x = x.log().clamp(min=torch.finfo(torch.float64).min, max=-(2.0**-32)).neg().log().neg()
    return x.float().to(device)


def _check(hidden, weight, bias, layout: ShardLayout, scale, soft_cap, d2t, sampling: SamplingParams) -> None:
    if soft_cap is not None or scale != 1.0:
        raise InvalidInput("soft_cap and scale: DFlash2 caps and scales its candidates after the top-k")
    if d2t is not None:
        raise InvalidInput("d2t: SGLang's candidate_topk reads the target head; it maps no draft ids")
    if layout.added_vocab or layout.vocab != layout.org_vocab:
        raise InvalidInput("shape: SGLang's candidate_topk takes the base vocabulary, every id a token")
    del hidden, weight, bias, sampling


def _plan(layout: ShardLayout, sampling: SamplingParams) -> tuple[int, torch.Tensor, torch.Tensor]:
    """The batch's k, the candidate rows, and each row's kept candidates (module docstring: glue)."""
    widest = min(lay.num_real for lay in every_rank(layout))
    greedy, top_k = sampling.greedy.cpu(), sampling.top_k.cpu()
    on = (top_k > 0) & (top_k < layout.vocab)
    rows = greedy | (on & (top_k <= min(widest, MAX_FUSED_CANDIDATE_TOPK)))
    if widest < 1:
        rows = torch.zeros_like(rows)
    k = max([1] + top_k[rows & ~greedy].tolist())
    keep = torch.where(greedy, 1, top_k.clamp(max=k))
    return k, rows, keep


def _candidates(hidden, weight, bias, layout: ShardLayout, k: int, rows: torch.Tensor, group: TPGroup):
    """SGLang's ``candidate_topk(hidden, lm_head, k, with_partition=True)`` on this rank: ids, vals, lse; not
    called when no row is a candidate row (a rank may then hold no token)."""
    if not bool(rows.any()):
        batch = hidden.shape[0]
        none = torch.zeros(batch, 1, dtype=torch.int64, device=hidden.device)
        return none, torch.full((batch, 1), -math.inf, device=hidden.device), torch.zeros(batch, device=hidden.device)
    token = RANK.set(group)
    try:
        return load().dflash.candidate_topk(hidden, _Head(weight, bias, layout), k, with_partition=True)
    finally:
        RANK.reset(token)


sglang_candidate_topk = sampler(
    lambda *args: _draw(_candidates, *args),
    "sglang_candidate_topk",
    """SGLang's ``candidate_topk`` with its log-normaliser, and the contract's draw over the kept candidates.""",
)


def _draw(candidates_fn, hidden, weight, bias, layout: ShardLayout, sampling, scale, soft_cap, d2t, group):
    """The contract's draw over the kept candidates of ``candidates_fn`` (module docstring: glue)."""
    _check(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    logits, _, _ = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    k, rows, keep = _plan(layout, sampling)
    ids, vals, lse = candidates_fn(hidden, weight, bias, layout, k, rows, group)
    device = vals.device
    x = scaled(vals.float(), sampling)
    kept = torch.arange(k, device=device).unsqueeze(0) < keep.to(device).unsqueeze(1)
    greedy = sampling.greedy.to(device).unsqueeze(1)
    noise = gumbel_noise(sampling.seed.to(device), ids)
    score = torch.where(greedy, x, x + noise).masked_fill(~kept, -math.inf)
    best = encode_keys(score, ids).argmax(dim=1, keepdim=True)
    tokens = ids.gather(1, best).squeeze(1)
    raw = vals.double().gather(1, best).squeeze(1) - lse.double()
    processed = torch.log_softmax(x.double().masked_fill(~kept, -math.inf), dim=1).gather(1, best).squeeze(1)
    log_probs = torch.stack([raw, torch.where(greedy.squeeze(1), raw, processed)], dim=1).float()
    kept_ids = torch.where(kept, ids, -1)
    notes = tuple("" if r else FALLBACK for r in rows.tolist())
    if not bool(rows.all()):  # every rank decides alike: the plan reads only the parameters and the layout
        back = ~rows.to(device)
        all_tokens, all_log_probs, all_kept = gathered_sample(logits, layout, group, d2t, sampling)
        tokens = torch.where(back, all_tokens, tokens)
        log_probs = torch.where(back.unsqueeze(1), all_log_probs, log_probs)
        width = max(kept_ids.shape[1], all_kept.shape[1])
        kept_ids, all_kept = (F.pad(t, (0, width - t.shape[1]), value=-1) for t in (kept_ids, all_kept))
        kept_ids = torch.where(back.unsqueeze(1), all_kept, kept_ids)
    return tokens, log_probs, kept_ids, notes


def _sglang_seeded(probs: torch.Tensor, top_k: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
    """SGLang's sampler on ``probs`` (``Sampler._sample_from_probs``): no top-k -> ``sampling_from_probs_torch``,
    else ``top_k_top_p_min_p_sampling_from_probs_torch``; column indices ``[B]``."""
    sampler = load().sampler
    positions = torch.zeros_like(seed)
    if not bool((top_k != TOP_K_ALL).any()):
        return sampler.sampling_from_probs_torch(probs, sampling_seed=seed, positions=positions).long()
    top_p, min_p = torch.ones(probs.shape[0], device=probs.device), torch.zeros(probs.shape[0], device=probs.device)
    out = sampler.top_k_top_p_min_p_sampling_from_probs_torch(probs, top_k, top_p, min_p, False, seed, positions)
    return out.long()


def _seeded(hidden, weight, bias, layout, sampling, scale, soft_cap, d2t, group):
    """SGLang's ``candidate_topk``, then SGLang's seeded top-k sampler over the candidates (noise by sort rank)."""
    _check(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    logits, _, _ = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    k, rows, keep = _plan(layout, sampling)
    ids, vals, _ = _candidates(hidden, weight, bias, layout, k, rows, group)
    device = vals.device
    greedy = sampling.greedy.to(device)
    temperature = torch.where(greedy, 1.0, sampling.temperature.to(device))  # sampling_params.py L245-248
    probs = torch.softmax(vals.float() / temperature.unsqueeze(1), dim=-1)  # Sampler.forward: div_, softmax
    column = _sglang_seeded(probs, keep.to(device), sampling.seed.to(device))
    tokens = ids.gather(1, column.view(-1, 1)).squeeze(1)
    notes = tuple("" if r else FALLBACK for r in rows.tolist())
    if not bool(rows.all()):
        back = (~rows).nonzero().flatten().tolist()
        sub = sampling.rows(back).to(device)
        gathered = group.all_gather(logits)  # [tp, B, shard]: SGLang gathers the logits before its Sampler
        full = logits.new_empty(logits.shape[0], layout.vocab)
        for lay in every_rank(layout):
            full[:, lay.token_ids(device)] = gathered[lay.rank][:, lay.token_rows(device)]
        x = full[back].float()
        probs = torch.softmax(x / torch.where(sub.greedy, 1.0, sub.temperature).unsqueeze(1), dim=-1)
        top_k = torch.where((sub.top_k > 0) & (sub.top_k < layout.vocab), sub.top_k, TOP_K_ALL)
        top_k = torch.where(sub.greedy, 1, top_k)
        tokens[back] = _sglang_seeded(probs, top_k, sub.seed)
    return tokens, None, None, notes


sglang_candidate_topk_seeded = sampler(_seeded, "sglang_candidate_topk_seeded", _seeded.__doc__)


def _candidates_corrected(hidden, weight, bias, layout: ShardLayout, k: int, rows: torch.Tensor, group: TPGroup):
    """``candidate_topk`` with its two findings corrected (ours, not SGLang's): each rank's top k and the merge
    over ranks keep the first of equal values (a stable descending sort: NaN first, then the smaller id, ranks in
    id order), and no lane past the row's end is taken (a real ``-inf`` is a value like any other); the
    log-normaliser is SGLang's, ``_topk_lse_torch``'s formula in float32 then ``logsumexp`` over ranks."""
    if not bool(rows.any()):
        return _candidates(hidden, weight, bias, layout, k, rows, group)
    logits = F.linear(hidden, weight[: layout.num_real], None if bias is None else bias[: layout.num_real]).float()
    order = logits.sort(dim=-1, descending=True, stable=True)
    vals, ids = order.values[:, :k], order.indices[:, :k] + layout.start
    top = vals[:, :1]
    lse = top.squeeze(-1) + (logits - top).exp().sum(dim=-1).log()
    gathered_vals, gathered_ids = gathered(group, vals), gathered(group, ids)
    merged = gathered_vals.sort(dim=-1, descending=True, stable=True)
    lse = torch.logsumexp(group.all_gather(lse.unsqueeze(-1)).squeeze(-1).T, dim=-1)
    return gathered_ids.gather(-1, merged.indices[:, :k]), merged.values[:, :k], lse


sglang_candidate_topk_corrected = sampler(
    lambda *args: _draw(_candidates_corrected, *args),
    "sglang_candidate_topk_corrected",
    """:func:`sglang_candidate_topk` over :func:`_candidates_corrected` (a correction, not SGLang's code).""",
)
for _fn in (sglang_candidate_topk, sglang_candidate_topk_seeded, sglang_candidate_topk_corrected):
    _fn.head = HEAD
    _fn.start = _start
    _fn.masks = ("top_k",)
    _fn.draws_from_candidates = True  # each rank's top k, merged
    _fn.process_bound = False
    _fn.needs = why_unavailable
sglang_candidate_topk_seeded.noise = sglang_murmur_noise
