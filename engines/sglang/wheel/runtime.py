"""SGLang's sampling pieces from the installed wheel, with stand-ins for what they import from SGLang's runtime: the
loader behind ``engines.sglang.subjects.sampling``'s subjects (that module's docstring says what each stand-in is and
why).
"""

from __future__ import annotations

import contextvars
import types
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import torch

from engines.sglang.wheel import kernels
from engines.sglang.wheel.compiled import wheel_functions
from engines.versions import SGLANG_VERSION
from sharded.group import TPGroup, gathered
from sharded.triton_env import TRITON_LOCK, interpreting

FILES = {
    "lilicorr": "sglang/kernels/ops/speculative/lilicorr.py",
    "dflash": "sglang/srt/models/dflash.py",
    "murmur": "sglang/kernels/ops/sampling/murmur_hash.py",
    "sampler": "sglang/srt/layers/sampler.py",
}


def pack(wheel: Path) -> Path:
    """A zip beside ``wheel`` of the files the subjects load from it (the kernels and the samplers) with the wheel's
    metadata, its licence and its RECORD cut to them: ``scripts/gpu_check --sglang-wheel`` takes it where the whole
    wheel (39 MB) is more than a GPU machine can be sent."""
    wanted = {*kernels.KERNEL_FILES.values(), *FILES.values()}
    info = f"{kernels.DIST}-{SGLANG_VERSION}.dist-info/"
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as error:
        raise ValueError(f"--pack-sglang: {wheel} is not a wheel ({error})") from None
    with archive:
        names = set(archive.namelist())
        if not {f"{info}METADATA", f"{info}RECORD"} <= names:
            raise ValueError(f"--pack-sglang: {wheel} is not sglang {SGLANG_VERSION}'s wheel (no {info})")
        missing = sorted(wanted - names)
        if missing:
            raise ValueError(f"--pack-sglang: {wheel} lacks {', '.join(missing)}")
        keep = wanted | {n for n in names if n.startswith(info) and ("licen" in n.lower() or n.endswith("METADATA"))}
        record = [line for line in archive.read(f"{info}RECORD").decode().splitlines() if line.split(",")[0] in keep]
        out = wheel.with_name(f"{kernels.DIST}-{SGLANG_VERSION}-files.zip")
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as packed:
            for name in sorted(keep):
                packed.writestr(name, archive.read(name))
            packed.writestr(f"{info}RECORD", "\n".join(record) + "\n")
    return out


def why_unavailable() -> str | None:
    """Why the subjects cannot run here (no wheel, another version, a file missing, no Triton, no CUDA), or None."""
    return kernels.why_unavailable(FILES)


# The rank running SGLang's code now: the simulated group runs its ranks as greenlets of one thread, each with its
# own context.
RANK: contextvars.ContextVar[TPGroup] = contextvars.ContextVar("sglang_rank")


class Coordinator:
    """The members of SGLang's ``GroupCoordinator`` its code under test calls, over the suite's group: the sizes,
    ``all_gather_into_tensor`` (every rank's tensor, flat in rank order; sizes checked as NCCL checks them) and an
    in-place ``broadcast``."""

    def __init__(self, group: TPGroup) -> None:
        self.group, self.world_size, self.rank_in_group = group, group.world_size, group.rank

    def all_gather_into_tensor(self, out: torch.Tensor, tensor: torch.Tensor) -> None:
        if out.numel() != self.world_size * tensor.numel():
            raise RuntimeError(
                f"all_gather_into_tensor: output of {out.numel()} elements, {self.world_size} x input {tensor.numel()}"
            )
        out.copy_(self.group.all_gather(tensor.contiguous()).reshape(out.shape))

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        tensor.copy_(self.group.all_gather(tensor.contiguous())[src])


class _Parallel:
    """``get_parallel()``: the running rank's sizes and groups (attention's TP group is the TP group here)."""

    @property
    def tp_size(self) -> int:
        return RANK.get().world_size

    @property
    def tp_group(self) -> Coordinator:
        return Coordinator(RANK.get())

    attn_tp_group = tp_group


def _all_gather(t: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``tensor_model_parallel_all_gather``: every rank's ``t`` concatenated along ``dim``, in rank order."""
    return gathered(RANK.get(), t, dim)


class _InterpretedCuda(torch.Tensor):
    """A CPU tensor that ``lilicorr_topk_lse`` takes for a CUDA one, so its Triton path runs under the interpreter."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def _dense_head_weight(weight: Any) -> bool:
    """``dflash_utils.is_dense_head_weight`` (L817-824)."""
    return weight is not None and weight.dtype in (torch.float16, torch.bfloat16, torch.float32)


@cache
def load() -> types.SimpleNamespace:
    """SGLang's functions, from the installed wheel's files (module docstring)."""
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    paths = kernels.kernel_paths(FILES)
    lilicorr = wheel_functions("lilicorr", paths["lilicorr"], None, {"selector_walk_triton": None})
    murmur = wheel_functions("murmur_hash", paths["murmur"], None, {})

    def topk_lse(logits: torch.Tensor, k: int):
        if interpreting() and not logits.is_cuda:
            logits = logits.as_subclass(_InterpretedCuda)
        with TRITON_LOCK:
            vals, ids, lse = lilicorr.lilicorr_topk_lse(logits, k)
        return tuple(t.as_subclass(torch.Tensor) for t in (vals, ids, lse))

    dflash = wheel_functions(
        "dflash",
        paths["dflash"],
        ("_radix_topk", "_project_candidate_logits", "candidate_topk"),
        {
            "lilicorr_topk_lse": topk_lse,
            "_flashinfer_top_k": None,  # flashinfer is not installed: the ImportError branch (L60-63)
            "get_parallel": _Parallel,
            "tensor_model_parallel_all_gather": _all_gather,
            "should_apply_lm_head_quant_method": lambda lm_head, quant_method: quant_method is not None,
            "is_dense_head_weight": _dense_head_weight,
        },
    )

    def murmur_hash32(seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor) -> torch.Tensor:
        """murmur_hash.py L104-128 without the CPU branch (``sgl_kernel``): the Triton launch on every device."""
        n, m = seed.shape[0], col_indices.shape[0]
        hashed = torch.empty((n, m), dtype=torch.uint32, device=seed.device)
        grid = (n, (m + 1023) // 1024)
        with TRITON_LOCK:
            murmur.murmur_hash32_kernel[grid](seed, positions, col_indices, hashed, n, m, BLOCK_SIZE=1024)
        return hashed

    sampler = wheel_functions(
        "sampler",
        paths["sampler"],
        ("multinomial_with_seed", "top_k_top_p_min_p_sampling_from_probs_torch", "sampling_from_probs_torch"),
        {"murmur_hash32": murmur_hash32, "is_npu": lambda: False, "envs": _Envs()},
    )
    return types.SimpleNamespace(
        lilicorr=lilicorr, dflash=dflash, sampler=sampler, murmur=murmur, murmur_hash32=murmur_hash32
    )


class _Envs:
    """``sglang.srt.environ.envs``: the one flag ``sampling_from_probs_torch`` reads, at its default (off)."""

    class SGLANG_OPT_USE_GUMBEL_SAMPLE:  # noqa: N801
        @staticmethod
        def get() -> bool:
            return False
