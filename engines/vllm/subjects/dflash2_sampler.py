"""vLLM 0.32.0's DFlash2 draft sampler on the vocab-parallel head, as a subject of the sampling properties.

What runs of vLLM (``vllm/`` in the installed wheel), in each rank process (``process_bound``, gloo):

* ``model_executor/layers/logits_processor.py``: ``LogitsProcessor.get_top_k_tokens`` (L253-318) on
  ``ParallelLMHead``, built and loaded by ``engines.vllm.subjects.layer.vllm_head`` (vLLM's distributed state from
  ``engines.vllm.subjects.layer.start_vllm``), called twice per k: plain, as
  ``DFlash2Qwen3ForCausalLM.compute_candidates`` calls it (``model_executor/models/qwen3_dflash2.py`` L408-413: ids and
  *unary logits*), and with ``return_log_probs=True`` (per-rank ``logsumexp`` combined by another ``logsumexp``,
  L292-299).
* ``v1/worker/gpu/spec_decode/dflash2/speculator.py`` (path-loaded by ``engines.vllm.wheel.triton_files.load(DFLASH2)``
  with the real Triton): ``CandidateSampler`` (L111-185), whose ``sample`` launches ``_selector_walk_kernel``
  (L15-75: ``gumbel_noised_argmax`` over the gathered candidates keyed by their global ids, ``IS_DRAFTING=True``,
  position ``sample_pos - 1``) and then ``_cache_draft_logits_kernel`` (L78-108: the realized proposal cache, the
  candidates' pre-temperature scores at their ids, ``-inf`` elsewhere, as ``draft_logits_spec`` fills it).
* ``v1/worker/gpu/spec_decode/rejection_sampler_utils.py``: ``_compute_local_logits_stats_kernel`` (L193-303, block
  maxima and sums of exponentials of ``draft_logits / T``, blocks of 8192 as ``rejection_sample`` L1098 launches
  it) and ``_compute_global_logprobs_and_logsumexp`` (L119-190, with ``_compute_global_logsumexp`` L21-45 and
  ``_compute_max_and_sumexp`` L10-18): the draft log-probability the rejection sampler gives the drafted token.
  These four functions are taken from the wheel file by name (:func:`_rejection_functions`: the file's imports
  need vLLM's watermark and Philox modules, which these functions do not use), compiled under the file's own path
  and line numbers, with the real ``triton``, ``tl`` and ``tldevice``.

The glue (ours):

1. **k.** DFlash2's K is one constexpr per batch (``selector_top_k``), so rows are grouped by k: the row's
   ``top_k`` when on, else (0 or at least the vocabulary) the whole logits vocabulary ``layout.vocab``.  A greedy
   row is grouped by its ``top_k`` too (K does not change its argmax).  Each group is one ``get_top_k_tokens``
   call and one ``CandidateSampler(num_reqs, num_steps=1, top_k=k)``.
2. **Scores.** The real model passes ``candidate_selector(candidate_ids, unary_logits, hidden, anchor_ids)``
   (``dflash2/speculator.py`` L233, L253-265; ``qwen3_dflash2.py`` L290-310: ``unary_logits + `` a learned
   pairwise term of [K predecessors, K candidates]).  That selector has no counterpart in the contract, so the
   scores are the **unary logits** ``compute_candidates`` returns (pairwise term 0), the same for every
   predecessor: ``[n, 1, K, K]`` (the walk reads ``scores[(row * K + previous) * K ...]``, previous 0 at step 0).
   Where ``n * K * K`` passes :data:`BATCHED_SCORES` (K near a large vocabulary), each row is its own launch.
3. **Walk.** ``sample_pos = 1`` on every row, so the walk's position ``sample_pos - 1`` is 0, the position
   ``fn.noise = vllm_noise(drafting=True)`` reads vLLM's noise at (vLLM salts it by ``2**30`` itself);
   ``idx_mapping = arange(n)``, ``temperature`` and ``seeds`` the rows', ``use_fp64=False``
   (``ModelConfig.use_fp64_gumbel``'s default).  ``draft_logits`` is passed (``draft_sample_method=
   "probabilistic"``, the configuration that samples), so ``SAMPLE_PROBABILISTIC`` is on and a greedy row (T = 0)
   takes the kernel's plain maximum through its temperature 0, as vLLM does.  The cache is ``[n, 1, W]`` with
   ``W = layout.padded_vocab`` (every id a rank's top-k can return, padding ids included: vLLM's cache is
   ``vocab_size`` wide and a padding id would be written past its row); its statistics read the first
   ``layout.vocab`` columns, as ``rejection_sample`` reads the draft vocabulary.
4. **Log-probabilities.** *raw*: the chosen id's value in ``get_top_k_tokens(return_log_probs=True)``'s output
   (NaN when that call did not return the id).  *processed*: ``_compute_global_logprobs_and_logsumexp``'s draft
   log-probability of the chosen token over the cache (``cached / T - lse(cached / T)``: the log-softmax over the
   kept candidates of scores / T), by a one-line Triton driver of ours (:func:`_driver`); a greedy row gives its
   raw one (the contract's rule; vLLM computes no draft log-probability at T = 0).  Nothing else is computed here.
5. **Kept.** A sampled row's K candidate ids (``-1`` padded to the widest group); a greedy row's chosen token
   alone (the contract's kept set of a greedy row).  No notes (no row falls back).

The head is pinned to no ``d2t`` (``fn.head``): DFlash2 drafts over the target vocabulary and maps no draft ids.
Top-p is not taken (``fn.masks = ("top_k",)``): the walk has none.  Nothing is validated on vLLM's behalf: what
``get_top_k_tokens`` raises (``torch.topk`` with k above a shard's columns) is what the suite reports.
:func:`vllm_dflash2_sampler_corrected` is the same glue over the project's corrected ``get_top_k_tokens``
(``engines.vllm.corrections.processor``).

Triton, NumPy and vLLM are imported lazily: this module imports without them.
"""

from __future__ import annotations

import ast
import math
import sys
import types
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F

from engines.versions import release_key, vllm_release
from engines.vllm.subjects import layer
from engines.vllm.subjects.gumbel import vllm_noise
from engines.vllm.subjects.layer import start_vllm, vllm_head
from engines.vllm.wheel.triton_files import DFLASH2, vllm_dir, why_unavailable
from reference.sampling import SamplingParams
from sharded.layout import ShardLayout
from sharded.local_sampling import sampler
from sharded.triton_env import TRITON_LOCK, interpreting, on_kernel_device

__all__ = [
    "vllm_dflash2_sampler",
    "vllm_dflash2_sampler_corrected",
    "vllm_dflash2_sampler_step2",
    "why_unavailable",
]

REJECTION = "v1/worker/gpu/spec_decode/rejection_sampler_utils.py"
_REJECTION_FUNCTIONS = (
    "_compute_max_and_sumexp",
    "_compute_global_logsumexp",
    "_compute_global_logprobs_and_logsumexp",
    "_compute_local_logits_stats_kernel",
)
# From vLLM 0.33.0 the statistics kernel knows a request's bonus logit (``_is_bonus_logit``, L198-205) by the
# next logit's local position being 0, and takes ``num_logits`` where 0.32.0 took ``num_speculative_steps``: one
# logit per request would be all bonus.  From then on each row is laid out as ``rejection_sample`` lays out a
# request of one speculative step: its draft logit (local position 0), then its bonus logit (1).
BONUS_LAYOUT_SINCE = "0.33.0"
BATCHED_SCORES = 1 << 24  # the most [n, 1, K, K] score elements one walk launch is given (glue 2)
VOCAB_BLOCK_SIZE = 8192  # rejection_sample's block of the statistics kernel (rejection_sampler_utils.py L1098)
HEAD: dict[str, object] = {"d2t": "none", "target_extra": 0}
_RS: Any = None  # the rejection functions, set by _kernels() before the driver's first launch


@cache
def _row_mapped() -> bool:
    """Whether the release's statistics kernel reads the draft-logits cache through a row mapping (0.34.0 on:
    ``draft_logits_row_mapping_ptr``, batch-sharded sampling's), read from its file."""
    return "draft_logits_row_mapping_ptr" in (vllm_dir() / REJECTION).read_text()


def _bonus_logits() -> int:
    """The logits a request holds after its draft steps': 0 through vLLM 0.32.0 (its statistics kernel knows the
    bonus by ``num_speculative_steps``), 1 from ``BONUS_LAYOUT_SINCE`` (the bonus logit itself)."""
    return 1 if release_key(vllm_release()) >= release_key(BONUS_LAYOUT_SINCE) else 0


@cache
def _rejection_functions() -> types.ModuleType:
    """The four functions of ``rejection_sampler_utils.py`` (and ``_is_bonus_logit``, which the statistics kernel
    calls from 0.33.0 on), compiled from the wheel file under its own path."""
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice

    wanted = {*_REJECTION_FUNCTIONS, *(("_is_bonus_logit",) if _bonus_logits() else ())}
    path = vllm_dir() / REJECTION
    tree = ast.parse(path.read_text(), filename=str(path))
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    if {n.name for n in body} != wanted:
        raise RuntimeError(f"{path} lacks {sorted(wanted - {n.name for n in body})}")
    name = "tpargmax_vllm_" + REJECTION.removesuffix(".py").replace("/", "_")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__dict__.update(torch=torch, triton=triton, tl=tl, tldevice=tldevice)
    if _row_mapped():  # 0.34.0 on: the functions find a request's cache row with draft_logits.draft_logits_row
        from engines.vllm.wheel.triton_files import DRAFT_LOGITS, load

        module.draft_logits_row = load(DRAFT_LOGITS).draft_logits_row
    sys.modules[name] = module  # Triton's JIT looks a kernel's module up by name
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), module.__dict__)  # noqa: S102
    return module


@cache
def _driver():
    """Our one-program-per-row Triton driver: the draft log-probability of ``token`` that vLLM's rejection sampler
    computes (``_compute_global_logprobs_and_logsumexp``, ``HAS_DRAFT_LOGITS=True``) at draft step ``STEP``, read
    at the row's logit of that step (``PER`` logits per row)."""
    import triton
    import triton.language as tl

    @triton.jit
    def draft_log_prob_kernel(
        out_ptr, token_ptr, temp_ptr, target_ptr, target_stride, tmax_ptr, tmax_stride, tsum_ptr, tsum_stride,
        draft_ptr, draft_stride_0, draft_stride_1, row_map_ptr, dmax_ptr, dmax_stride, dsum_ptr, dsum_stride,
        vocab_num_blocks, PADDED_VOCAB_NUM_BLOCKS: tl.constexpr, PER: tl.constexpr, STEP: tl.constexpr,
        ROW_MAPPED: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        token = tl.load(token_ptr + row)
        temp = tl.load(temp_ptr + row).to(tl.float32)
        if ROW_MAPPED:  # 0.34.0 on: the function takes the cache's row mapping after its strides
            _, draft_log_prob, _, _ = _RS._compute_global_logprobs_and_logsumexp(
                token, True, row * PER + STEP, row, STEP, temp, target_ptr, target_stride, tmax_ptr, tmax_stride,
                tsum_ptr, tsum_stride, draft_ptr, draft_stride_0, draft_stride_1, row_map_ptr, dmax_ptr, dmax_stride,
                dsum_ptr, dsum_stride, vocab_num_blocks, PADDED_VOCAB_NUM_BLOCKS, True,
            )  # fmt: skip
        else:
            _, draft_log_prob, _, _ = _RS._compute_global_logprobs_and_logsumexp(
                token, True, row * PER + STEP, row, STEP, temp, target_ptr, target_stride, tmax_ptr, tmax_stride,
                tsum_ptr, tsum_stride, draft_ptr, draft_stride_0, draft_stride_1, dmax_ptr, dmax_stride, dsum_ptr,
                dsum_stride, vocab_num_blocks, PADDED_VOCAB_NUM_BLOCKS, True,
            )  # fmt: skip
        tl.store(out_ptr + row, draft_log_prob)

    return draft_log_prob_kernel


@cache
def _kernels() -> tuple[types.ModuleType, types.ModuleType]:
    """vLLM's DFlash2 speculator file and the rejection functions (loaded once per process)."""
    global _RS
    from engines.vllm.wheel.triton_files import interpreter_comparisons_are_int1, load

    if interpreting():
        interpreter_comparisons_are_int1()
    _RS = _rejection_functions()
    _driver()
    return load(DFLASH2), _RS


def _start(group: Any) -> None:
    start_vllm(group)
    _kernels()


def _groups(layout: ShardLayout, sampling: SamplingParams) -> dict[int, list[int]]:
    """Rows by their K: ``top_k`` when on, else the whole logits vocabulary (glue 1)."""
    top_k = sampling.top_k.cpu()
    k = torch.where((top_k > 0) & (top_k < layout.vocab), top_k, layout.vocab).tolist()
    out: dict[int, list[int]] = {}
    for row, kk in enumerate(k):
        out.setdefault(int(kk), []).append(row)
    return out


def _processed_log_probs(
    rs: types.ModuleType, draft_logits: torch.Tensor, tokens: torch.Tensor, temperature: torch.Tensor, vocab: int
) -> torch.Tensor:
    """vLLM's draft log-probability of ``tokens`` at the last draft step of the realized cache ``draft_logits
    [n, steps, W]`` (glue 4), the statistics laid out per row as the release's ``rejection_sample`` lays out a
    request: a logit per draft step, then the bonus logit from 0.33.0 on (``_bonus_logits``)."""
    n, steps = draft_logits.shape[:2]
    per = steps + _bonus_logits()
    vocab_size = min(vocab, draft_logits.shape[-1])
    blocks = max(1, math.ceil(vocab_size / VOCAB_BLOCK_SIZE))
    padded = 1 << (blocks - 1).bit_length()
    f32 = dict(dtype=torch.float32, device=draft_logits.device)
    i64 = dict(dtype=torch.int64, device=draft_logits.device)
    target = torch.zeros(n * per, max(vocab_size, 1), **f32)  # the target's statistics are computed and not used
    t_argmax = torch.empty(n * per, blocks, **i64)
    t_max, t_sum, d_max, d_sum = (torch.empty(n * per, blocks, **f32) for _ in range(4))
    rows = torch.arange(n, **i64).repeat_interleave(per)  # expanded_idx_mapping: each logit's request
    local_pos = torch.arange(per, **i64).repeat(n)  # expanded_local_pos: the draft steps, then the bonus
    # From 0.34.0 the cache's row mapping follows its strides: each request at its own row (identity; Triton's
    # interpreter takes no None for a pointer).  The last argument: num_speculative_steps through 0.32.0, num_logits
    # from 0.33.0 on.
    row_map = (torch.arange(n, dtype=torch.int32, device=draft_logits.device),) if _row_mapped() else ()
    rs._compute_local_logits_stats_kernel[(n * per, blocks)](
        t_argmax, t_argmax.stride(0), t_max, t_max.stride(0), t_sum, t_sum.stride(0), d_max, d_max.stride(0),
        d_sum, d_sum.stride(0), target, target.stride(0), draft_logits, draft_logits.stride(0),
        draft_logits.stride(1), *row_map, rows, local_pos, temperature, vocab_size,
        n * per if _bonus_logits() else steps, BLOCK_SIZE=VOCAB_BLOCK_SIZE, HAS_DRAFT_LOGITS=True,
    )  # fmt: skip
    out = torch.full((n,), math.nan, **f32)
    _driver()[(n,)](
        out, tokens.contiguous(), temperature, target, target.stride(0), t_max, t_max.stride(0), t_sum,
        t_sum.stride(0), draft_logits, draft_logits.stride(0), draft_logits.stride(1), *(row_map or (None,)),
        d_max, d_max.stride(0), d_sum, d_sum.stride(0), blocks, PADDED_VOCAB_NUM_BLOCKS=padded, PER=per,
        STEP=steps - 1, ROW_MAPPED=bool(row_map),
    )  # fmt: skip
    return out


def _walk(ids: torch.Tensor, unary: torch.Tensor, sampling: SamplingParams, width: int, vocab: int, steps: int = 1):
    """``CandidateSampler.sample`` over one group's candidates, ``steps`` draft steps (glue 3): the last step's
    tokens ``[n]`` and processed log-probs ``[n]``."""
    speculator, rs = _kernels()
    n, k = ids.shape
    device = ids.device
    kernel_device = on_kernel_device(ids).device
    on = lambda t: t.to(kernel_device)  # noqa: E731
    i64 = dict(dtype=torch.int64, device=kernel_device)
    temperature = on(sampling.temperature.float().contiguous())
    seeds = on(sampling.seed.to(torch.int64).contiguous())
    # The walk reads row r's scores at step s at ((r * steps + s) * K + previous) * K: a batch needs the
    # [n, steps, K, K] layout, which for a K near the vocabulary does not fit in memory; then each row is its own
    # launch (one step: the row's K scores at offset 0, as previous is 0 there).  Each program reads only its own
    # row, so the draw is the same either way.
    launches = [list(range(n))] if n * steps * k * k <= BATCHED_SCORES else [[r] for r in range(n)]
    draft_tokens = torch.zeros(n, **i64)
    draft_logits = torch.full((n, steps, width), -math.inf, dtype=torch.float32, device=kernel_device)
    with TRITON_LOCK:
        for rows in launches:
            m, index = len(rows), torch.tensor(rows, device=kernel_device)
            # glue 2: no pairwise term, the same unary logits for every predecessor and step
            full = m > 1 or steps > 1
            scores = unary.float()[rows].view(m, 1, 1, k).expand(m, steps, k if full else 1, k)
            sampler = speculator.CandidateSampler(m, steps, k, kernel_device)
            tokens = torch.zeros(m * steps, **i64)
            cache = torch.full((m, steps, width), -math.inf, dtype=torch.float32, device=kernel_device)
            logits_cache = _draft_logits_cache(speculator, cache)
            sampler.sample(
                on(ids[rows].view(m, 1, k).expand(m, steps, k)),
                on(scores),
                m,
                torch.ones(m * steps, **i64),  # sample_pos 1 at every step: the walk's position 0
                torch.arange(m, **i64).repeat_interleave(steps),  # idx_mapping, per (request, step)
                temperature[index].contiguous(),
                seeds[index].contiguous(),
                tokens,
                logits_cache,
                False,
            )
            draft_tokens[index], draft_logits[index] = tokens.view(m, steps)[:, -1], cache
        processed = _processed_log_probs(rs, draft_logits, draft_tokens, temperature, vocab)
    return draft_tokens.to(device), processed.to(device)


def _draft_logits_cache(speculator: Any, cache: torch.Tensor) -> Any:
    """The draft-logits cache as the release's walk takes it: the tensor itself, or from 0.34.0 on vLLM's own
    ``DraftLogitsCache``, replicated (no row mapping: each request at its own row), holding ``cache`` as its values;
    under Triton's interpreter, which fails on a None pointer argument, the identity row mapping says the same."""
    cache_class = getattr(speculator, "DraftLogitsCache", None)
    if cache_class is None:
        return cache
    m, steps, width = cache.shape
    held = cache_class(m, steps, width, dtype=cache.dtype, fill=-math.inf, device=cache.device)
    held.values = cache  # the same rows: written in place, read back as ``cache``
    if interpreting():  # Triton's interpreter takes no None for a pointer: the same rows, mapped one to one
        held.row_mapping = torch.arange(m, dtype=torch.int32, device=cache.device)
    return held


def _sample(
    top_k_fn, hidden, weight, bias, layout: ShardLayout, sampling: SamplingParams, scale, soft_cap, d2t, steps=1
):
    sampling.check(hidden.shape[0])
    head, processor = vllm_head(layout, weight, scale, soft_cap)
    batch, device = hidden.shape[0], hidden.device
    tokens = torch.zeros(batch, dtype=torch.int64, device=device)
    log_probs = torch.full((batch, 2), math.nan, dtype=torch.float32, device=device)
    groups = _groups(layout, sampling)
    kept = torch.full((batch, max(groups)), -1, dtype=torch.int64, device=device)
    greedy = sampling.greedy.to(device)
    for k, rows in groups.items():
        h, sub = hidden[rows], sampling.rows(rows).to(device)
        ids, unary = top_k_fn(processor, head, h, k, bias, return_log_probs=False)  # compute_candidates
        lp_ids, lp = top_k_fn(processor, head, h, k, bias, return_log_probs=True)
        token, processed = _walk(ids, unary, sub, layout.padded_vocab, layout.vocab, steps)
        at = lp_ids == token.unsqueeze(1)
        raw = torch.where(at.any(1), lp.float().masked_fill(~at, 0.0).sum(1), math.nan)
        index = torch.tensor(rows, device=device)
        tokens[index] = token
        log_probs[index] = torch.stack([raw, torch.where(sub.greedy, raw, processed.float())], dim=1)
        row_kept = F.pad(ids, (0, kept.shape[1] - k), value=-1)
        only = F.pad(token.unsqueeze(1), (0, kept.shape[1] - 1), value=-1)
        kept[index] = torch.where(sub.greedy.unsqueeze(1), only, row_kept)
    del greedy, d2t
    return tokens, log_probs, kept, ("",) * batch


def _vllm_top_k(processor, head, hidden, k, bias, *, return_log_probs):
    return processor.get_top_k_tokens(head, hidden, k, bias, return_log_probs=return_log_probs)


def _fixed_top_k(processor, head, hidden, k, bias, *, return_log_probs):
    from engines.vllm.corrections.processor import get_top_k_tokens

    return get_top_k_tokens(processor, head, hidden, k, bias, return_log_probs=return_log_probs)


vllm_dflash2_sampler = sampler(
    lambda *args: _sample(_vllm_top_k, *args[:-1]),
    "vllm_dflash2_sampler",
    """vLLM's ``get_top_k_tokens`` (plain and ``return_log_probs=True``), then ``CandidateSampler.sample``'s walk
    over the unary logits, and the rejection sampler's draft log-probability (module docstring).""",
)
vllm_dflash2_sampler_corrected = sampler(
    lambda *args: _sample(_fixed_top_k, *args[:-1]),
    "vllm_dflash2_sampler_corrected",
    """:func:`vllm_dflash2_sampler` over ``engines.vllm.corrections.processor.get_top_k_tokens`` (the project's
    correction of causes V1 and V3-V10), vLLM's walk and log-probability code unchanged.""",
)
vllm_dflash2_sampler_step2 = sampler(
    lambda *args: _sample(_vllm_top_k, *args[:-1], steps=2),
    "vllm_dflash2_sampler_step2",
    """:func:`vllm_dflash2_sampler` judged at the walk's second draft step: the same candidates and unary scores at
    both steps, position 0 at both, so the step's draw differs from the first only by the seed the release keys it
    with (``spec_step_seed(seed, 1)`` from vLLM 0.33.0 on); its log-probability from the rejection sampler's
    statistics at draft step 1.""",
)


def _needs() -> str | None:
    """What the subjects lack here: vLLM's Triton files and a device or the interpreter, then what its head does."""
    return why_unavailable() or layer.why_unavailable()


for _fn in (vllm_dflash2_sampler, vllm_dflash2_sampler_corrected, vllm_dflash2_sampler_step2):
    _fn.noise = vllm_noise(drafting=True)
    _fn.masks = ("top_k",)
    _fn.draws_from_candidates = True  # get_top_k_tokens' merged top k
    _fn.head = HEAD
    layer.runs_in_vllm(_fn, _start, _needs)
vllm_dflash2_sampler_step2.noise = vllm_noise(drafting=True, step=1)  # the second step's seed
