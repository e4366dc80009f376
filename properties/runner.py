"""Run an implementation on every rank of a simulated group, and the oracle, on built inputs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from properties.cases import Inputs
from reference.oracle import draft_logits, tokens_from_draft_logits
from sharded.local_argmax import BUILTINS
from sharded.simulated import DEFAULT_TIMEOUT, SimGroup, run_simulated

IMPL_ENV = "TPARGMAX_IMPL"


@dataclass(frozen=True)
class Impl:
    """An implementation under test and the spec that names it (for replay commands)."""

    spec: str
    fn: Callable[..., torch.Tensor]

    def __str__(self) -> str:
        return self.spec


def load_impl(spec: str) -> Impl:
    """A built-in short name (``vllm_pairs``, ``packed_key``) or ``package.module:attr``."""
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


# Seconds a collective may wait; conftest sets it from --collective-timeout.
collective_timeout = DEFAULT_TIMEOUT


def rank_kwargs(inputs: Inputs, rank: int) -> dict[str, Any]:
    """The contract's keyword arguments for one rank, copied so that ranks share no memory."""
    bias = inputs.bias_shard(rank)
    return {
        "hidden": inputs.hidden.clone(),
        "weight": inputs.weight_shard(rank).clone(),
        "bias": None if bias is None else bias.clone(),
        "layout": inputs.layouts[rank],
        "scale": inputs.case.scale,
        "soft_cap": inputs.case.soft_cap,
        "d2t": None if inputs.d2t is None else inputs.d2t.clone(),
    }


def run_ranks(
    impl: Impl, inputs: Inputs, tweak: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[list[object], list[SimGroup]]:
    """Call ``impl`` on every rank of a simulated group; ``tweak`` edits each rank's arguments."""

    def rank_fn(group: SimGroup) -> object:
        kwargs = rank_kwargs(inputs, group.rank)
        return impl.fn(**(tweak(kwargs) if tweak else kwargs), group=group)

    return run_simulated(rank_fn, inputs.tp, collective_timeout)


def oracle_tokens(inputs: Inputs, logits: torch.Tensor | None = None) -> torch.Tensor:
    """The classic path's tokens (from already computed draft ``logits`` if given)."""
    if logits is None:
        logits = oracle_draft_logits(inputs)
    return tokens_from_draft_logits(logits, inputs.d2t, inputs.target_vocab)


def oracle_draft_logits(inputs: Inputs, *, raw: bool = False) -> torch.Tensor:
    """The oracle's ``[B, vocab]`` logits; ``raw`` skips soft cap and scale (for diagnosis)."""
    return draft_logits(
        inputs.hidden,
        [inputs.weight_shard(r) for r in range(inputs.tp)],
        None if inputs.bias is None else [inputs.bias_shard(r) for r in range(inputs.tp)],
        vocab=inputs.case.vocab,
        scale=1.0 if raw else inputs.case.scale,
        soft_cap=None if raw else inputs.case.soft_cap,
    )
