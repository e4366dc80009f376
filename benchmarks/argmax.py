"""Benchmark the classic path against the local paths over real gloo process groups.

    python -m benchmarks.argmax [--vocab ...] [--tp ...] [--batch ...] [--dtype ...] [--png FILE]

Each rank starts from its own shard of logits (the matmul is the same on both
paths, so it is left out) and runs one reduction step: the classic path
all-gathers every logit and takes the argmax; the local paths exchange one
(value, id) pair or one int64 key per row.  A step's time is the slowest rank's;
the table shows the median over repetitions after a warm-up, the speed-up of
each local path over the classic one, and the bytes each rank receives.
"""

from __future__ import annotations

from sharded import quiet_numpy_notice

if __name__ == "__main__":  # a command line: hide torch's NumPy notice before torch is imported below
    quiet_numpy_notice()

import argparse
import statistics
import sys
import time

import torch

from groups.pool import RankPool
from sharded.layout import vocab_parallel_layout
from sharded.local_argmax import REDUCTIONS

PATHS = ("classic_gather", "vllm_pairs", "packed_key")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def time_on_rank(*, path: str, batch: int, vocab: int, dtype: str, warmup: int, reps: int, budget: float, group):
    """Seconds per step on this rank (a task run by every rank of a pool)."""
    layout = vocab_parallel_layout(vocab, group.world_size)[group.rank]
    g = torch.Generator().manual_seed(group.rank)
    logits = torch.randn(batch, layout.size, generator=g).to(DTYPES[dtype])
    reduce, times = REDUCTIONS[path], []
    for i in range(warmup + reps):
        group.all_reduce(torch.zeros(1), op="sum")  # start together
        start = time.perf_counter()
        reduce(logits, layout, group)
        times.append(time.perf_counter() - start)
        # every rank stops after the same step: rank 0's clock decides for all
        spent = torch.tensor([sum(times[warmup:]) if i >= warmup + 2 else 0.0])
        if float(group.all_reduce(spent, op="max")) > budget:
            break
    return times[warmup:]


def bytes_per_rank(path: str, batch: int, padded: int, tp: int, itemsize: int) -> int:
    """The formulas that properties/test_traffic.py checks against the counted bytes."""
    formulas = {
        "classic_gather": batch * padded * itemsize,
        "vllm_pairs": batch * 2 * tp * 4,
        "packed_key": batch * 8,
    }
    return formulas[path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.argmax", description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256, 151936, 262144])
    parser.add_argument("--tp", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=["bf16", "fp32"])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15, help="at most this many timed steps per cell")
    parser.add_argument("--budget", type=float, default=0.25, help="stop timing a cell after this many seconds")
    parser.add_argument("--png", help="also draw a chart (needs the optional matplotlib)")
    args = parser.parse_args(argv)

    head = f"{'V':>7} {'tp':>2} {'B':>4} {'dtype':>5} | " + " ".join(f"{p + ' ms':>17}" for p in PATHS)
    head += f" | {'pairs x':>7} {'key x':>6} | {'classic B':>11} {'pairs B':>8} {'key B':>6}"
    print(head + "\n" + "-" * len(head), flush=True)
    rows = []
    for tp in args.tp:
        pool = RankPool(tp, timeout=300)
        try:
            for vocab in args.vocab:
                padded = vocab_parallel_layout(vocab, tp)[0].padded_vocab
                for batch in args.batch:
                    for dtype in args.dtype:
                        ms = {}
                        for path in PATHS:
                            task = dict(
                                path=path,
                                batch=batch,
                                vocab=vocab,
                                dtype=dtype,
                                warmup=args.warmup,
                                reps=args.reps,
                                budget=args.budget,
                            )
                            per_rank, _ = pool.run("benchmarks.argmax:time_on_rank", [task] * tp)
                            ms[path] = 1e3 * statistics.median(max(step) for step in zip(*per_rank, strict=True))
                        size = DTYPES[dtype].itemsize
                        nbytes = [bytes_per_rank(p, batch, padded, tp, size) for p in PATHS]
                        rows.append((vocab, tp, batch, dtype, ms, nbytes))
                        print(
                            f"{vocab:>7} {tp:>2} {batch:>4} {dtype:>5} | "
                            + " ".join(f"{ms[p]:>17.3f}" for p in PATHS)
                            + f" | {ms['classic_gather'] / ms['vllm_pairs']:>7.1f}"
                            f" {ms['classic_gather'] / ms['packed_key']:>6.1f}"
                            f" | {nbytes[0]:>11} {nbytes[1]:>8} {nbytes[2]:>6}",
                            flush=True,
                        )
        finally:
            pool.close()
    if args.png:
        draw(rows, args.png)
    return 0


def draw(rows: list[tuple], path: str) -> None:
    """Speed-up of each local path over the classic one, by vocabulary, one panel per tp."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--png: matplotlib is not installed (pip install -e '.[bench]'); no chart drawn", file=sys.stderr)
        return
    tps = sorted({r[1] for r in rows})
    fig, axes = plt.subplots(1, len(tps), figsize=(5 * len(tps), 4), squeeze=False)
    for ax, tp in zip(axes[0], tps, strict=True):
        for batch, dtype in sorted({(r[2], r[3]) for r in rows if r[1] == tp}):
            cells = [r for r in rows if r[1:4] == (tp, batch, dtype)]
            for p, style in (("vllm_pairs", "-"), ("packed_key", "--")):
                ax.plot(
                    [c[0] for c in cells],
                    [c[4]["classic_gather"] / c[4][p] for c in cells],
                    style,
                    marker="o",
                    label=f"{p} B={batch} {dtype}",
                )
        ax.set(title=f"tp={tp}", xlabel="vocabulary", ylabel="speed-up over classic", yscale="log")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart written to {path}")


if __name__ == "__main__":
    sys.exit(main())
