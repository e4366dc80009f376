"""Run an implementation on every rank (simulated threads or a gloo process pool), and the oracle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from groups.devices import rank_device
from groups.pool import RankPool
from groups.simulated import DEFAULT_TIMEOUT, run_simulated
from properties import coverage
from properties.case_tensors import build
from properties.cases import Case, Inputs
from reference.oracle import draft_logits, tokens_from_draft_logits
from reference.sampling import target_logits
from reference.topk import classic_top_k
from sharded.group import Traffic
from sharded.impls import Impl

# Set by conftest from --collective-timeout, --gloo-tps, --heads and --device.
collective_timeout = DEFAULT_TIMEOUT
device = "cpu"  # where every rank's tensors and the oracle live: groups.devices
gloo_tps: tuple[int, ...] = (2, 4)
HEADS = ("all", "base")  # base: only base ids are tokens (added rows, if any, lie beyond the logits vocabulary)
heads = "all"
pinned: dict[str, object] = {}  # Case fields every case takes: the fixed head of the implementation(s) under test

BACKENDS = ("sim", "gloo", "torchrun")
_pools: dict[int, RankPool] = {}
torchrun_job = None  # the TorchrunJob when properties.torchrun runs this process as rank 0


def backend_tps(backend: str) -> tuple[int, ...]:
    """The tps a backend offers for TP invariance; the simulated group also runs any tp a case draws."""
    if backend == "torchrun":
        return (torchrun_job.world_size,)
    return gloo_tps if backend == "gloo" else (1, 2, 4, 8)


def nearest_tp(tp: int, backend: str) -> int:
    """``tp`` if ``backend`` runs it (the simulated group runs every tp), else the nearest tp it runs
    (the smaller on a draw)."""
    tps = backend_tps(backend)
    return tp if backend == "sim" or tp in tps else min(tps, key=lambda t: (abs(t - tp), t))


def pin_heads(impls: list[Impl]) -> None:
    """Fix every case's head to the one the implementations under test were built for (model classes)."""
    global pinned
    fixed = {tuple(sorted(impl.head.items())): impl for impl in impls if impl.head}
    if len(fixed) > 1:
        raise ValueError(f"{' and '.join(map(str, fixed.values()))} fix different heads: test them in separate runs")
    pinned = dict(next(iter(fixed))) if fixed else {}


def prepare(case: Case, backend: str = "sim") -> Inputs:
    """Build ``case`` for ``backend``, moving its tp to the nearest one the backend runs (under
    ``--heads base``, its logits vocabulary down to the base ids; with a fixed head, to that head), on ``device``."""
    tp = nearest_tp(case.tp, backend)  # first: a Case checks that its tp splits its head
    if pinned:
        case = replace(case, **pinned, tp=tp)
    if heads == "base" and case.logits_vocabulary > case.vocab:
        case = replace(case, logits_vocab=case.vocab, tp=tp)
    inputs = replace(build(replace(case, tp=tp)), backend=backend).on(device)
    coverage.observe(inputs, lambda: oracle_draft_logits(inputs))
    return inputs


def rank_kwargs(inputs: Inputs, rank: int) -> dict[str, Any]:
    """The contract's keyword arguments for one rank, on its device, copied so that ranks share no memory
    with each other or the oracle (an implementation may write into its arguments)."""
    where = rank_device(inputs.device, rank)
    bias = inputs.bias_shard(rank)
    return {
        "hidden": inputs.hidden.to(where, copy=True),
        "weight": inputs.weight_shard(rank).clone(),
        "bias": None if bias is None else bias.clone(),
        "layout": inputs.layouts[rank],
        "scale": inputs.case.scale,
        "soft_cap": inputs.case.soft_cap,
        "d2t": None if inputs.d2t is None else inputs.d2t.to(where, copy=True),
    }


def gloo_pool(world_size: int) -> RankPool:
    """This process's pool of gloo ranks of that size, started on first use and after a fault."""
    pool = _pools.get(world_size)
    if pool is None or not pool.alive or pool.timeout != collective_timeout:
        if pool is not None:
            pool.close()
        pool = _pools[world_size] = RankPool(world_size, backend="gloo", timeout=collective_timeout)
    return pool


def run_ranks(
    impl: Impl, inputs: Inputs, tweak: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[list[object], list[Traffic]]:
    """Call ``impl`` on every rank of ``inputs.backend``; ``tweak`` edits each rank's arguments.

    Each rank's output comes back on the hidden states' device, where the oracle judges it (ranks may span
    GPUs, and a torchrun job's replies arrive on the CPU).
    """
    per_rank = [rank_kwargs(inputs, r) for r in range(inputs.tp)]
    if tweak is not None:
        per_rank = [tweak(kwargs) for kwargs in per_rank]
    results, traffic = run_per_rank(impl, inputs.backend, per_rank)
    return [_moved(out, inputs.hidden.device) for out in results], traffic


def _moved(out: object, where: torch.device) -> object:
    """A rank's output (a tensor, or a tuple of them for top-k) on ``where``; anything else as it is."""
    if isinstance(out, torch.Tensor):
        return out.to(where)
    if isinstance(out, tuple):
        return tuple(_moved(part, where) for part in out)
    return out


def run_per_rank(impl: Impl, backend: str, per_rank: list[dict[str, Any]]) -> tuple[list[object], list[Traffic]]:
    """Call ``impl`` with each rank's own keyword arguments on a group of ``len(per_rank)`` on ``backend``."""
    if backend == "gloo":
        return gloo_pool(len(per_rank)).run(impl.spec, per_rank)
    if backend == "torchrun":
        return torchrun_job.run(impl.spec, per_rank)
    results, groups = run_simulated(lambda g: impl.fn(**per_rank[g.rank], group=g), len(per_rank), collective_timeout)
    return results, [g.traffic for g in groups]


def oracle_tokens(inputs: Inputs, logits: torch.Tensor | None = None) -> torch.Tensor:
    """The classic path's tokens (from already computed draft ``logits`` if given)."""
    if logits is None:
        logits = oracle_draft_logits(inputs)
    return tokens_from_draft_logits(logits, inputs.d2t, inputs.target_vocab)


def oracle_top_k(
    inputs: Inputs, k: int, logits: torch.Tensor | None = None, *, mapped_only: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The classic path's top k (through the d2t scatter): target ids ``[B, k]`` and their logits;
    ``mapped_only``: the named divergence's side, where ``-inf`` slots take mapped targets only."""
    if logits is None:
        logits = oracle_draft_logits(inputs)
    return classic_top_k(logits, k, inputs.d2t, inputs.target_vocab, mapped_only=mapped_only)


def oracle_target_logits(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle's logits by target id on the CPU (with d2t: scattered, ``-inf`` where no draft id maps), and which
    targets some draft id maps to: the row the classic sampler draws from.  Computed once per Inputs."""
    if "target logits" not in inputs.memo:
        d2t = None if inputs.d2t is None else inputs.d2t.cpu()
        inputs.memo["target logits"] = target_logits(oracle_draft_logits(inputs).cpu(), d2t, inputs.target_vocab)
    return inputs.memo["target logits"]


def oracle_draft_logits(inputs: Inputs, *, raw: bool = False) -> torch.Tensor:
    """The oracle's ``[B, vocab]`` logits of the token ids; ``raw`` skips soft cap and scale (for diagnosis).

    It gets the head's sizes from the case, never the layouts, and places rows by its own derivation.
    Computed once per Inputs (a check, its diagnosis and the statistics all ask), so never written to.
    """
    key = "raw draft logits" if raw else "draft logits"
    if key not in inputs.memo:
        inputs.memo[key] = _draft_logits(inputs, raw)
    return inputs.memo[key]


def _draft_logits(inputs: Inputs, raw: bool) -> torch.Tensor:
    case = inputs.case
    return draft_logits(
        inputs.hidden,
        [inputs.weight_shard(r) for r in range(inputs.tp)],
        None if inputs.bias is None else [inputs.bias_shard(r) for r in range(inputs.tp)],
        vocab=inputs.vocab,
        org_vocab=case.vocab,
        added_vocab=case.added,
        padding_size=case.padding_size,
        scale=1.0 if raw else case.scale,
        soft_cap=None if raw else case.soft_cap,
    )
