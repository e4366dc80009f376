"""Benchmark sampling on vocab-sharded logits over real gloo process groups: classic gather, gumbel_pairs, candidates.

    python -m benchmarks.sampling [--vocab ...] [--tp ...] [--batch ...] [--candidates ...] [--reps N]

As in benchmarks.argmax, each rank starts from its own shard of logits and one step is everything after the head: the
classic path all-gathers every logit and runs reference.sampling.classic_sample on the whole row
(sharded.local_sampling.gathered_sample); gumbel_pairs sends 7 float64 words per row and rank; candidates sends
each rank's top C, 3C + 5 words.  The samplers compute their logits from (hidden, weight) themselves, and a bf16
matmul costs about 3 ms per row on this CPU whatever the hidden size, so the timed steps hand them the rank's logits in
place of the head (``checked_shard_logits`` swapped for a pass-through).  Each row compares one local path with the
classic path under the same sampling parameters: temperature 0.8, top-k off for gumbel_pairs (it refuses masks),
top-k C/2 for candidates (no rank then holds a kept token it did not send, ties aside, so no row falls back; the
table counts the rows that did).  A step's time is the slowest rank's; a cell is the median over up to --reps steps
after a warm-up, stopping at a time budget (a cell whose warm-up step alone passes it is that one step).  The bytes
are what the group's all-gathers delivered to one rank in one step.
"""

from __future__ import annotations

from sharded import quiet_numpy_notice

if __name__ == "__main__":
    quiet_numpy_notice()

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from unittest import mock

import torch

from benchmarks.argmax import DTYPES
from groups.pool import RankPool
from reference.sampling import SamplingParams
from sharded import local_sampling
from sharded.layout import ShardLayout, vocab_parallel_layout

TEMPERATURE = 0.8


def sampling_params(batch: int, top_k: int, candidates: int) -> SamplingParams:
    """Every row sampled (no greedy row), with its own seed."""
    return SamplingParams(
        temperature=torch.full((batch,), TEMPERATURE),
        top_k=torch.full((batch,), top_k, dtype=torch.int64),
        top_p=torch.ones(batch),
        seed=torch.arange(batch, dtype=torch.int64) * 7919 + 1,
        candidates=max(candidates, 1),
    )


def _given_logits(hidden: torch.Tensor, *_) -> torch.Tensor:
    """Stands in for the head while timing: ``hidden`` is this rank's logits already (the matmul is left out)."""
    return hidden


def _step(path: str, logits: torch.Tensor, layout: ShardLayout, params: SamplingParams, group) -> Callable[[], tuple]:
    """One sampling step of ``path``; its result's 4th element is the per-row notes (non-empty: fell back)."""
    if path == "classic_gather":
        return lambda: (*local_sampling.gathered_sample(logits, layout, group, None, params), ())
    fn = local_sampling.SAMPLING_BUILTINS[path]
    return lambda: fn(logits, None, None, layout, sampling=params, group=group)


def time_on_rank(
    *,
    path: str,
    batch: int,
    vocab: int,
    dtype: str,
    top_k: int,
    candidates: int,
    warmup: int,
    reps: int,
    budget: float,
    group,
) -> tuple[list[float], int, int]:
    """This rank's seconds per timed step, the bytes one step's all-gathers delivered to it, and the rows that fell
    back (a task run by every rank of a pool)."""
    layout = vocab_parallel_layout(vocab, group.world_size)[group.rank]
    g = torch.Generator().manual_seed(group.rank)
    logits = torch.randn(batch, layout.size, generator=g).to(DTYPES[dtype])
    step = _step(path, logits, layout, sampling_params(batch, top_k, candidates), group)
    times, nbytes, notes = [], 0, ()
    with mock.patch.object(local_sampling, "checked_shard_logits", _given_logits):
        for i in range(warmup + reps):
            group.all_reduce(torch.zeros(1), op="sum")  # start together
            before = group.traffic.bytes["all_gather"]
            start = time.perf_counter()
            out = step()
            times.append(time.perf_counter() - start)
            if i == 0:
                nbytes, notes = group.traffic.bytes["all_gather"] - before, out[3]
            # every rank stops after the same step, once the slowest rank's timed steps pass the budget; a warm-up
            # step that alone passes it is kept as the one timed step (a step of seconds has nothing left to warm)
            spent = torch.tensor([sum(times[warmup:]) if i >= warmup else times[-1]])
            if float(group.all_reduce(spent, op="max")) > budget:
                break
    return times[warmup:] or times[-1:], nbytes, sum(bool(n) for n in notes)


def bytes_per_rank(path: str, batch: int, padded: int, tp: int, itemsize: int, candidates: int = 0) -> int:
    """What one rank receives per step: tests/test_bench_sampling.py checks these against the counted bytes."""
    formulas = {
        "classic_gather": batch * padded * itemsize,  # every rank's [B, shard] logits in the head's dtype
        "gumbel_pairs": batch * 7 * 8 * tp,  # [B, 7] float64 from every rank
        "candidates": batch * (3 * candidates + 5) * 8 * tp,  # [B, 3C + 5] float64 from every rank
    }
    return formulas[path]


def measure(pool: RankPool, tp: int, **task) -> tuple[float, int, int]:
    """Median ms of the slowest rank's steps, rank 0's counted bytes per step, and the rows that fell back."""
    per_rank, _ = pool.run("benchmarks.sampling:time_on_rank", [task] * tp)
    times = [r[0] for r in per_rank]
    ms = 1e3 * statistics.median(max(step) for step in zip(*times, strict=True))
    return ms, per_rank[0][1], per_rank[0][2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sampling", description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[151936])
    parser.add_argument("--tp", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--candidates", type=int, nargs="+", default=[8, 32, 128], help="C; top-k is C/2")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="the logits' dtype")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--reps", type=int, default=10, help="at most this many timed steps per cell")
    parser.add_argument("--budget", type=float, default=0.5, help="stop timing a cell after this many seconds")
    args = parser.parse_args(argv)
    if any(c < 2 for c in args.candidates) or args.reps < 1:
        parser.error("--candidates must be at least 2 (top-k is C/2) and --reps at least 1")
    cores = os.cpu_count() or 1
    if max(args.tp) > cores:
        print(f"note: tp {max(args.tp)} runs that many ranks on {cores} cores; those times include waiting for a core")

    head = f"{'V':>7} {'tp':>2} {'B':>4} {'path':<12} {'C':>3} {'top_k':>5} | {'classic ms':>10} {'path ms':>10}"
    head += f" {'speed-up':>8} | {'classic B':>11} {'path B':>8} | fell back"
    print(head + "\n" + "-" * len(head), flush=True)
    for tp in args.tp:
        pool = RankPool(tp, timeout=300)
        try:
            for vocab in args.vocab:
                for batch in args.batch:
                    for path, c in [("gumbel_pairs", 0)] + [("candidates", c) for c in args.candidates]:
                        task = dict(batch=batch, vocab=vocab, dtype=args.dtype, top_k=c // 2, candidates=c)
                        task.update(warmup=args.warmup, reps=args.reps, budget=args.budget)
                        classic_ms, classic_b, _ = measure(pool, tp, path="classic_gather", **task)
                        ms, nbytes, fell = measure(pool, tp, path=path, **task)
                        print(
                            f"{vocab:>7} {tp:>2} {batch:>4} {path:<12} {c or '-':>3} {c // 2:>5} |"
                            f" {classic_ms:>10.3f} {ms:>10.3f} {classic_ms / ms:>8.1f} |"
                            f" {classic_b:>11} {nbytes:>8} | {f'{fell}/{batch}' if c else '-'}",
                            flush=True,
                        )
        finally:
            pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
