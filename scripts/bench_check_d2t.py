"""Time and peak memory of ``tpargmax check-d2t`` on a multi-GB draft, in every form people download.

    .venv/bin/python scripts/bench_check_d2t.py [--gib 3] [--dir /tmp] [--runs 3]

It builds an EAGLE3-style draft in a temporary directory: a ``d2t`` of 32,000
ids into a 128,256-token target (with two entries swapped, unless ``--sorted``,
so the check takes its longest path: it confirms the inversion by running the
local path), its ``t2d`` mask, ``config.json``, and
``--gib`` GiB of bf16 weights, written three ways: one ``model.safetensors``,
a 2-shard ``model.safetensors.index.json`` with the tables in the second shard,
and ``pytorch_model.bin``. For each form it points ``check-d2t`` at the
directory and at the file or index inside, each as a fresh process after
evicting the files from the page cache, and prints the wall time and the peak
resident memory (``wait4``'s ``ru_maxrss``). The drafts are built in a child
process and this one never imports torch: Linux carries a process's peak
memory across fork and exec, so a large parent would inflate its children's. The exit status is 1 if a run goes
over ``--max-seconds`` or ``--max-mb``, or if the forms disagree on the verdict.
It is a benchmark, not a test: the suite never times anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORMS = ("safetensors", "shards", "bin")  # tests.d2t_fixtures.FORMS, named here to keep torch out of this process
TARGET_VOCAB, DRAFT_VOCAB = 128_256, 32_000
BLOCK = (32_768, 4_096)  # one bf16 weight of 256 MiB


def build(directory: Path, form: str, gib: int, swapped: bool) -> None:
    """EAGLE3's tables (the draft's tokens, a sorted subset of the target's) beside ``gib`` GiB of bf16 weights."""
    sys.path.insert(0, str(ROOT))
    from sharded import quiet_numpy_notice

    quiet_numpy_notice()
    import torch

    from tests.d2t_fixtures import write_draft

    g = torch.Generator().manual_seed(0)
    used = torch.randperm(TARGET_VOCAB, generator=g)[:DRAFT_VOCAB].sort().values
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[used] = True
    if swapped:
        used[[1000, 20000]] = used[[20000, 1000]]
    tables = {"d2t": used - torch.arange(DRAFT_VOCAB), "t2d": t2d}
    block = torch.ones(BLOCK, dtype=torch.bfloat16)  # safetensors may point every weight at one buffer;
    distinct = form == "bin"  # torch.save would store a shared storage once
    weights = {f"model.layers.{i}.weight": block.clone() if distinct else block for i in range(gib * 4)}
    config = {"architectures": ["LlamaForCausalLMEagle3"], "vocab_size": TARGET_VOCAB, "draft_vocab_size": DRAFT_VOCAB}
    write_draft(directory, tables, weights, form, config)


def evict(directory: Path) -> None:
    """Drop the files from the page cache, so each run reads what it needs from disk, as after a download."""
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def measure(*argv: str) -> tuple[float, float, int, str]:
    """(seconds, peak MB, exit status, verdict line) of one Python process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    verdict = next((line for line in out.splitlines() if line.startswith("use_local_argmax_reduction")), out.strip())
    return seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=int, default=3, help="GiB of weights (default %(default)s)")
    parser.add_argument("--dir", default=None, help="where the temporary drafts go (default: the system's temp)")
    parser.add_argument("--runs", type=int, default=3, help="runs per path (default %(default)s)")
    parser.add_argument("--max-seconds", type=float, default=3.0)
    parser.add_argument("--max-mb", type=float, default=500.0)
    parser.add_argument("--sorted", action="store_true", help="a strictly increasing (safe) table instead")
    parser.add_argument("--build", nargs=2, metavar=("DIR", "FORM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(Path(args.build[0]), args.build[1], args.gib, swapped=not args.sorted)
        return 0
    work = Path(tempfile.mkdtemp(prefix="tpargmax-bench-d2t-", dir=args.dir))
    failed, verdicts = False, set()
    try:
        seconds, mb, _, _ = measure("-W", "ignore", "-c", "import torch")
        print(f"the floor, python -c 'import torch': {seconds:.2f} s, {mb:.0f} MB")
        print(f"{'form':<12} {'path':<36} {'size':>8} {'seconds':>8} {'peak MB':>8}  verdict")
        for form in FORMS:
            directory = work / form
            builder = [sys.executable, __file__, "--gib", str(args.gib), "--build", str(directory), form]
            builder += ["--sorted"] if args.sorted else []
            subprocess.run(builder, check=True)
            size = sum(p.stat().st_size for p in directory.iterdir()) / 2**30
            entry = next(p for p in directory.iterdir() if p.name.startswith(("model.safetensors", "pytorch_model")))
            for target in (directory, entry):
                for _ in range(args.runs):
                    evict(directory)
                    seconds, mb, status, verdict = measure("-m", "tpargmax", "check-d2t", str(target))
                    verdicts.add((status, verdict))
                    over = seconds > args.max_seconds or mb > args.max_mb
                    failed |= over
                    shown = target.name if target == entry else f"{target.name}/"
                    flag = "  OVER" if over else ""
                    print(f"{form:<12} {shown:<36} {size:>5.2f}GiB {seconds:>8.2f} {mb:>8.0f}  {verdict}{flag}")
            shutil.rmtree(directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if len(verdicts) != 1:
        print(f"the forms disagree: {sorted(verdicts)}")
        return 1
    print(f"bounds: {args.max_seconds} s and {args.max_mb:.0f} MB per run: {'EXCEEDED' if failed else 'met'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
