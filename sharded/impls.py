"""Name an implementation under test: a built-in short name or ``package.module:attr``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sharded.local_argmax import BUILTINS as ARGMAX_BUILTINS
from sharded.local_top_k import TOPK_BUILTINS

BUILTINS = {**ARGMAX_BUILTINS, **TOPK_BUILTINS}

IMPL_ENV = "TPARGMAX_IMPL"
TOPK_IMPL_ENV = "TPARGMAX_TOPK_IMPL"


@dataclass(frozen=True)
class Impl:
    """An implementation under test and the spec that names it (for replay commands)."""

    spec: str
    fn: Callable[..., torch.Tensor]

    def __str__(self) -> str:
        return self.spec


def load_impl(spec: str) -> Impl:
    """A built-in short name (``vllm_pairs``, ``packed_key``, ``topk_pairs``, ...) or ``package.module:attr``."""
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
