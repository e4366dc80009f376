"""SGLang 0.5.23's shipped GPU local argmax, and its classic path, as subjects of the suite.

Only SGLang's two Triton kernel files run here, loaded from the installed ``sglang`` wheel by file path
(:func:`load_kernels`): SGLang's package ``__init__`` and its dependencies are never imported, and no SGLang
code is copied into this project.  The few lines of glue around the kernels (which columns are valid, the
all-gather, the merge over ranks) are restated below, step by step, with the SGLang lines each step follows.

The glue SGLang wraps around the kernels (``sglang/srt/layers/logits_processor.py``, ``LogitsProcessor``):

1. Logits.  ``_compute_lm_head`` multiplies the hidden states by the rank's head shard: for an unquantized
   head (``should_apply_lm_head_quant_method`` is false) ``torch.matmul(hidden, weight.T)``, without the
   bias; a quantization method's ``apply`` takes ``embedding_bias`` (``UnquantizedEmbeddingMethod.apply`` in
   ``sglang/srt/layers/quantization/unquant.py`` is ``F.linear(x, weight, bias)``).  Here:
   ``F.linear(hidden, weight, bias)``, the same matmul when there is no bias.  (``LogitsProcessor.forward``
   never passes a bias; the suite plants its special values, NaN and infinities, through the bias, so here
   the bias stands for whatever made those fp32 logits.)
2. Scale.  ``_get_logits`` then runs ``logits.mul_(self.logit_scale)`` when the processor was built with a
   ``logit_scale``, *before* the soft cap (the contract caps first, then scales).  Here: ``logits * scale``
   when ``scale != 1``.  The subjects' head (:data:`HEAD`) pins ``scale=1.0``, as SGLang's soft-capped
   models (``Gemma2ForCausalLM``, ``beam``) build ``LogitsProcessor(config)`` without a ``logit_scale``.
3. Deferral.  With a positive ``config.final_logit_softcapping`` (``LogitsProcessor.__init__`` turns a
   negative one into ``None``), fp32 contiguous 2-D logits and a TP all-gather to do
   (``_can_gather_softcap_fused``), a processor whose ``defer_verify_gather`` is set (DFlash v2's target
   verify, ``sglang/srt/speculative/dflash_worker_v2.py``) returns the rank's un-capped shard.  The worker
   then calls ``deferred_argmax`` when ``_can_skip_verify_logits`` holds (greedy rows, no grammar, no
   logprobs), else ``finish_deferred_gather``, but only if ``is_deferred_shard`` (``shard_width <
   vocab_size``).
4. ``sglang_deferred_argmax`` follows ``LogitsProcessor.deferred_argmax``:
   ``col_offset = rank_in_group * shard_width`` (``group.rank`` here, not the layout's ``start``);
   ``valid_width = max(0, min(shard_width, vocab_size - col_offset))`` with ``vocab_size`` =
   ``config.vocab_size`` (``layout.vocab`` here); the kernel ``softcap_row_argmax`` (from
   ``sglang/kernels/ops/sampling/softcap_row_argmax.py``) gives each row's ``(max, float(first argmax +
   col_offset))``; ``all_gather_into_tensor`` of those ``[B, 2]`` pairs into ``[world, B, 2]``
   (``group.all_gather`` here); ``argmax`` over ranks of the values, and the float id of that rank,
   ``.long()``.
5. ``sglang_classic`` follows ``finish_deferred_gather`` -> ``_gather_softcap_fused``: all-gather of the
   shards into ``[world, B, shard_width]``, ``width = min(vocab_size, world * shard_width)``, the kernel
   ``gathered_softcap_logits`` (``sglang/kernels/ops/activation/softcap.py``) writing the soft-capped,
   vocab-major fp32 ``[B, width]``; then ``DFlashWorkerV2._accept_block``'s ``torch.argmax(next_token_logits,
   dim=-1)`` (``apply_dflash_verify_logits_adjustments`` changes nothing for greedy rows without
   penalties).  A subject, never an oracle.

Draft ids: this path verifies the *target* model's logits, so SGLang maps no draft ids there (no
``hot_token_id`` / ``d2t``); a ``d2t`` is refused, and the head pins ``d2t="none"``.  At tp 1 SGLang never
defers (there is no TP gather), but the same glue on a group of one is well defined and is run as is.

Where the adapter refuses input (``ValueError``), it is because SGLang never takes this path with it (no
positive soft cap, logits other than fp32, added vocabulary, a ``d2t``), not validation on SGLang's behalf:
what the kernels accept or return (their ``assert``s included) is what the suite reports.

Under Triton's CPU interpreter (``TRITON_INTERPRET=1``) there is no libdevice: ``libdevice.tanh`` is a stub
that returns ``None``, and extern calls are unsupported.  There, and only there, each loaded kernel module's
``libdevice`` is replaced by :class:`_InterpretedLibdevice`, whose ``tanh`` is torch's CPU fp32 ``tanh`` --
the function the oracle's soft cap uses on the CPU -- so an interpreter run tests the kernels' control flow
and the glue with ``tanh`` bit-equal to the reference's.  On CUDA the kernels run as shipped
(``__nv_tanhf``, and Triton's fp32 ``/``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from engines.versions import SGLANG_VERSION
from reference.checks import InvalidInput
from sharded import triton_env
from sharded.layout import ShardLayout
from sharded.triton_env import TRITON_LOCK, interpreting

DIST = "sglang"
KERNEL_FILES = {
    "softcap_row_argmax": "sglang/kernels/ops/sampling/softcap_row_argmax.py",
    "softcap": "sglang/kernels/ops/activation/softcap.py",
}
SOFT_CAP = 30.0  # Gemma 2's final_logit_softcapping, and the default of SGLang's BeamConfig
INSTALL_HINT = (
    "SGLang is not installed: install it with `.venv/bin/tpargmax install-sglang` "
    f"(sglang {SGLANG_VERSION} without dependencies, 39 MB)"
)
TRITON_SUBJECT = "SGLang's Triton kernels"
TRITON_HINT = triton_env.not_installed(TRITON_SUBJECT)
DEVICE_HINT = triton_env.no_device(TRITON_SUBJECT)

# The Case fields the subjects fix: fp32 logits, SGLang's final soft cap, base ids only (every id a token
# below config.vocab_size), no logit_scale, and no draft ids.
HEAD: dict[str, object] = {
    "dtype": "float32",
    "added": 0,
    "logits_vocab": None,
    "soft_cap": SOFT_CAP,
    "scale": 1.0,
    "d2t": "none",
}


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def kernel_paths(files: dict[str, str] = KERNEL_FILES) -> dict[str, Path]:
    """The wheel's ``files`` (name -> path in the wheel; default the two kernel files) as the installed wheel lists
    them (its RECORD), else under ``find_spec``'s package directory; neither way imports ``sglang``.  Empty when
    the wheel is absent."""
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return {}
    listed = {str(f).replace("\\", "/"): f for f in dist.files or ()}
    paths = {name: Path(dist.locate_file(listed[rel])) for name, rel in files.items() if rel in listed}
    if len(paths) < len(files):
        spec = importlib.util.find_spec(DIST)  # a top-level name: finds the package, runs nothing
        if spec is not None and spec.submodule_search_locations:
            root = Path(next(iter(spec.submodule_search_locations))).parent
            paths = {name: root / rel for name, rel in files.items()}
    return {name: path for name, path in paths.items() if path.is_file()}


def why_unavailable(files: dict[str, str] = KERNEL_FILES) -> str | None:
    """Why the subjects whose code is the wheel's ``files`` cannot run here (no wheel, another version, a file
    missing, no Triton, no CUDA), or None."""
    return wheel_missing(files) or triton_env.why_unavailable(TRITON_SUBJECT)


def wheel_missing(files: dict[str, str]) -> str | None:
    """Why the wheel's ``files`` cannot be read here (no wheel, another version, a file missing), or None: all that
    a subject of torch alone needs."""
    version = _installed_version()
    if version is None:
        return INSTALL_HINT
    if version != SGLANG_VERSION:
        return f"sglang {version} is installed, the subjects are SGLang {SGLANG_VERSION}'s: {INSTALL_HINT}"
    missing = sorted(set(files) - set(kernel_paths(files)))
    if missing:
        return f"sglang {version} is installed without {', '.join(files[m] for m in missing)}: {INSTALL_HINT}"
    return None


@dataclass(frozen=True)
class Kernels:
    """The two kernel modules, executed from the wheel's files."""

    row_argmax: ModuleType  # softcap_row_argmax.py
    softcap: ModuleType  # softcap.py (gathered_softcap_logits)


class _InterpretedLibdevice:
    """``libdevice`` for Triton's interpreter, which has none: ``tanh`` is torch's CPU fp32 ``tanh``."""

    @staticmethod
    def tanh(x: Any) -> Any:
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        data = torch.tanh(torch.from_numpy(x.handle.data)).numpy()
        return tl.core.tensor(TensorHandle(data, x.handle.dtype.scalar), x.type)


@cache
def load_kernels() -> Kernels:
    """Execute the two kernel files from the installed wheel, under private module names (never ``sglang.*``)."""
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    with TRITON_LOCK:  # the files build their kernels with Triton: one loader at a time (sharded.triton_env)
        modules = {name: _execute(name, path) for name, path in kernel_paths().items()}
    return Kernels(row_argmax=modules["softcap_row_argmax"], softcap=modules["softcap"])


def _execute(name: str, path: Path) -> ModuleType:
    """Execute one kernel file under a private module name, with the interpreter's ``libdevice`` where it runs."""
    module_name = f"tpargmax_sglang_{SGLANG_VERSION.replace('.', '_')}_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # Triton's JIT looks a kernel's module up by name
    spec.loader.exec_module(module)
    if interpreting():
        module.libdevice = _InterpretedLibdevice()
    return module


def _launch_on(device: torch.device) -> AbstractContextManager[Any]:
    """Triton launches on the current CUDA device: make it the tensors' (a rank of the simulated group may
    live on another GPU; an SGLang rank process has its own device current)."""
    return torch.cuda.device(device) if device.type == "cuda" else nullcontext()


def _start(group: Any) -> None:
    """Once per rank process, outside the collective timeout: import Triton and execute the kernel files."""
    load_kernels()


def _shard_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    layout: ShardLayout,
    scale: float,
    soft_cap: float | None,
    d2t: torch.Tensor | None,
) -> torch.Tensor:
    """This rank's fp32 ``[B, shard_width]`` logits as SGLang's deferred shard holds them (steps 1-3): matmul
    (plus bias), then ``logit_scale`` if any; not yet capped.  Refuses a head SGLang never defers."""
    if soft_cap is None or not soft_cap > 0:
        raise InvalidInput(
            f"soft_cap must be > 0, got {soft_cap}: SGLang defers the gather only with a positive "
            "final_logit_softcapping (LogitsProcessor._can_gather_softcap_fused)"
        )
    if d2t is not None:
        raise InvalidInput("d2t: SGLang's deferred argmax verifies the target model's logits; it maps no draft ids")
    for name, t in (("hidden", hidden), ("weight", weight), ("bias", bias)):
        if t is not None and t.dtype != torch.float32:
            raise InvalidInput(f"dtype: SGLang's deferred path takes fp32 logits only; {name} is {t.dtype}")
    if hidden.ndim != 2 or weight.ndim != 2 or hidden.shape[1] != weight.shape[1]:
        raise InvalidInput(f"shape mismatch: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}")
    if weight.shape[0] != layout.size:
        raise InvalidInput(f"shape: weight has {weight.shape[0]} rows, the layout gives {layout.size}")
    if bias is not None and tuple(bias.shape) != (layout.size,):
        raise InvalidInput(f"bias shape {tuple(bias.shape)}, expected ({layout.size},)")
    if layout.added_vocab or layout.vocab != layout.org_vocab:
        raise InvalidInput(
            "shape: SGLang's head has base ids only, every one a token (config.vocab_size), got "
            f"added_vocab={layout.added_vocab}, logits vocabulary {layout.vocab} of {layout.org_vocab}"
        )
    logits = F.linear(hidden, weight, bias)
    if scale != 1.0:
        logits = logits * scale  # logit_scale, before the cap (_get_logits)
    return logits.contiguous()


def sglang_deferred_argmax(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    layout: ShardLayout,
    *,
    scale: float = 1.0,
    soft_cap: float | None = None,
    d2t: torch.Tensor | None = None,
    group: Any,
) -> torch.Tensor:
    """``LogitsProcessor.deferred_argmax`` (step 4): SGLang's kernel per rank, pairs gathered, best rank's id."""
    logits = _shard_logits(hidden, weight, bias, layout, scale, soft_cap, d2t)
    kernels = load_kernels()
    shard_width = logits.shape[1]
    col_offset = group.rank * shard_width
    valid_width = max(0, min(shard_width, layout.vocab - col_offset))
    with TRITON_LOCK, _launch_on(logits.device):
        local = kernels.row_argmax.softcap_row_argmax(logits, float(soft_cap), valid_width, col_offset)
    gathered = group.all_gather(local)  # [world, B, 2], rank-major as all_gather_into_tensor lays it
    best_rank = gathered[..., 0].argmax(dim=0, keepdim=True)
    return gathered[..., 1].gather(0, best_rank).squeeze(0).long()


def sglang_classic(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    layout: ShardLayout,
    *,
    scale: float = 1.0,
    soft_cap: float | None = None,
    d2t: torch.Tensor | None = None,
    group: Any,
) -> torch.Tensor:
    """``finish_deferred_gather`` then ``torch.argmax`` (step 5): every shard gathered, capped by SGLang's kernel."""
    logits = _shard_logits(hidden, weight, bias, layout, scale, soft_cap, d2t)
    kernels = load_kernels()
    num_tokens, shard_width = logits.shape
    gathered = group.all_gather(logits).contiguous()  # [world, B, shard_width]
    width = min(layout.vocab, group.world_size * shard_width)
    output = torch.empty((num_tokens, width), dtype=torch.float32, device=logits.device)
    with TRITON_LOCK, _launch_on(logits.device):
        full = kernels.softcap.gathered_softcap_logits(gathered, float(soft_cap), output)
    return torch.argmax(full, dim=-1)


def kernel_argmax(logits: torch.Tensor, soft_cap: float | None) -> torch.Tensor:
    """SGLang's per-rank kernel alone over a whole fp32 shard, for the benchmark; it always caps (at
    :data:`SOFT_CAP` when ``soft_cap`` is None)."""
    kernels = load_kernels()
    with TRITON_LOCK, _launch_on(logits.device):
        return kernels.row_argmax.softcap_row_argmax(logits, float(soft_cap or SOFT_CAP), logits.shape[1], 0)


for _fn in (sglang_deferred_argmax, sglang_classic):
    _fn.head = HEAD
    _fn.start = _start
    _fn.process_bound = False  # no engine state: the kernels run on any group, the simulated one included
    _fn.needs = why_unavailable
sglang_classic.path = "classic"
sglang_deferred_argmax.path = "local"
