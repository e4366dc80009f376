"""Name an implementation under test: a built-in short name or ``package.module:attr``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sharded.engine_variants import VARIANTS
from sharded.local_argmax import BUILTINS as ARGMAX_BUILTINS
from sharded.local_top_k import TOPK_BUILTINS
from sharded.vllm_layer import INSTALL_HINT, VLLM_BUILTINS, VLLM_TOPK_BUILTINS, vllm_available

BUILTINS = {**ARGMAX_BUILTINS, **VARIANTS, **TOPK_BUILTINS, **VLLM_BUILTINS, **VLLM_TOPK_BUILTINS}

IMPL_ENV = "TPARGMAX_IMPL"
TOPK_IMPL_ENV = "TPARGMAX_TOPK_IMPL"


@dataclass(frozen=True)
class Impl:
    """An implementation under test and the spec that names it (for replay commands)."""

    spec: str
    fn: Callable[..., torch.Tensor]

    def __str__(self) -> str:
        return self.spec

    @property
    def process_bound(self) -> bool:
        """Whether it needs a process of its own per rank (an engine's distributed state): not on ``sim``."""
        return bool(getattr(self.fn, "process_bound", False))

    @property
    def classic(self) -> bool:
        """Whether it is a classic path (gather every logit, scatter through ``d2t``, argmax): ``fn.path``."""
        return getattr(self.fn, "path", "local") == "classic"

    @property
    def head(self) -> dict[str, object]:
        """Case fields the implementation fixes (a model class built once for one head); empty if none."""
        return dict(getattr(self.fn, "head", None) or {})

    def start(self, group: object) -> None:
        """Its once-per-process start-up (``fn.start(group)``, if any), run before its first task and
        outside the collective timeout: an engine's imports and distributed set-up take seconds."""
        start = getattr(self.fn, "start", None)
        if start is not None:
            start(group)


def load_impl(spec: str) -> Impl:
    """A built-in short name (``vllm_pairs``, ``packed_key``, ``topk_pairs``, ...) or ``package.module:attr``."""
    if spec in VLLM_BUILTINS or spec in VLLM_TOPK_BUILTINS:
        if not vllm_available():
            raise ValueError(f"--impl {spec}: {INSTALL_HINT}")
    if spec in BUILTINS:
        return Impl(spec, BUILTINS[spec])
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"--impl {spec!r}: use a built-in name {sorted(BUILTINS)} or MODULE:ATTR")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--impl {spec!r}: cannot load it: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"--impl {spec!r}: {attr} is not callable")
    return Impl(spec, fn)
