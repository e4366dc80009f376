"""Run an implementation on every rank (simulated threads or a gloo process pool), and the oracle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from groups.devices import rank_device
from groups.pool import DEFAULT_START_TIMEOUT, RankPool
from groups.simulated import run_simulated
from properties.cases.case import Case, Inputs
from properties.cases.tensors import build
from properties.harness import coverage
from properties.harness.settings import current
from properties.oracle import answer
from sharded.group import Traffic
from sharded.impls import Impl

_pools: dict[int, RankPool] = {}


def backend_tps(backend: str) -> tuple[int, ...]:
    """The tps a backend offers for TP invariance; the simulated group also runs any tp a case draws."""
    if backend == "torchrun":
        return (current().torchrun_job.world_size,)
    return current().gloo_tps if backend == "gloo" else (1, 2, 4, 8)


def nearest_tp(tp: int, backend: str) -> int:
    """``tp`` if ``backend`` runs it (the simulated group runs every tp), else the nearest tp it runs
    (the smaller on a draw)."""
    tps = backend_tps(backend)
    return tp if backend == "sim" or tp in tps else min(tps, key=lambda t: (abs(t - tp), t))


_last: list[tuple[tuple[str, str, str], Inputs]] = []  # the Inputs prepare built last, and what it was built from


def prepare(case: Case, backend: str = "sim") -> Inputs:
    """Build ``case`` for ``backend``, moving its tp to the nearest one the backend runs (under
    ``--heads base``, its logits vocabulary down to the base ids; with a fixed head, to that head), on the run's
    device.

    The same case for the same backend and device as the call before returns the same Inputs, with the oracle's
    answer it holds: a third of Hypothesis's examples draw the case of the example before (its mutations vary the
    rest), and building a case and its oracle logits was a fifth of a token-exact example.  An Inputs never
    changes once used, and every rank gets copies of its tensors (:func:`rank_kwargs`)."""
    tp = nearest_tp(case.tp, backend)  # first: a Case checks that its tp splits its head
    run = current()
    if run.pinned:
        case = replace(case, **run.pinned, tp=tp)
    if run.heads == "base" and case.logits_vocabulary > case.vocab:
        case = replace(case, logits_vocab=case.vocab, tp=tp)
    if case.tp != tp:
        case = replace(case, tp=tp)
    key = (repr(case), backend, run.device)  # repr: -0.0 and 0.0 are equal but build different heads
    if not (_last and _last[0][0] == key):
        _last[:] = [(key, replace(build(case), backend=backend).on(run.device))]
    inputs = _last[0][1]
    coverage.observe(inputs, lambda: answer(inputs).draft_logits)
    return inputs


def rank_kwargs(inputs: Inputs, rank: int) -> dict[str, Any]:
    """The contract's keyword arguments for one rank, on its device, copied so that ranks share no memory
    with each other or the oracle (an implementation may write into its arguments)."""
    where = rank_device(inputs.device, rank)
    bias = inputs.bias_shard(rank)
    hidden, dp_rows = inputs.rank_hidden[rank], inputs.dp_rows
    if dp_rows is not None:  # attention data parallel: the rank's own rows, and every rank's count
        start = sum(dp_rows[:rank])
        hidden = hidden[start : start + dp_rows[rank]]
    kwargs = {
        "hidden": hidden.to(where, copy=True),
        "weight": inputs.weight_shard(rank).clone(),
        "bias": None if bias is None else bias.clone(),
        "layout": inputs.layouts[rank],
        "scale": inputs.case.scale,
        "soft_cap": inputs.case.soft_cap,
        "d2t": None if inputs.d2t is None else inputs.d2t.to(where, copy=True),
    }
    return kwargs if dp_rows is None else {**kwargs, "dp_rows": dp_rows}


def gloo_pool(world_size: int) -> RankPool:
    """This process's pool of gloo ranks of that size, started on first use and after a fault."""
    pool, timeout = _pools.get(world_size), current().collective_timeout
    if pool is None or not pool.alive or pool.timeout != timeout:
        if pool is not None:
            pool.close()
        # A start-up (the ranks' imports, an engine's start) gets at least a collective's limit: a run that gives
        # its collectives longer (Triton's interpreter) starts slowly too.
        start = max(DEFAULT_START_TIMEOUT, timeout)
        pool = _pools[world_size] = RankPool(world_size, backend="gloo", timeout=timeout, start_timeout=start)
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
        return current().torchrun_job.run(impl.spec, per_rank)
    timeout = current().collective_timeout
    results, groups = run_simulated(lambda g: impl.fn(**per_rank[g.rank], group=g), len(per_rank), timeout)
    return results, [g.traffic for g in groups]
