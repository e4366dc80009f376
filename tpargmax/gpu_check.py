"""``scripts/gpu_check``: the suite on a GPU, and its record, ``docs/conformance/gpu.md`` with its JSON.

Each row is one pytest run under the derandomised ``ci`` profile with a fixed ``--max-examples``, so a rerun
draws the same cases:

1. the built-ins (and the fused Triton built-in ``triton_key``) with ``--device cuda`` on the simulated group,
   which runs every tp on one GPU; the top-k built-in likewise;
2. SGLang's shipped paths, when the pinned wheel is installed (``tpargmax install-sglang``, or
   ``--sglang-wheel`` here: the GPU machine has no package registry); the built-in samplers, and the engines' but
   DFlash2's, given SGLang's wheel and vLLM's Gumbel file (``--vllm-files``, written by ``--pack-vllm`` where vLLM
   is installed);
3. the TF32 trap (``tests.broken:tf32_matmul``), which must fail token-exactness and be named for rule 1;
4. the built-ins on a torchrun job's NCCL group, one rank per GPU: tp = the node's GPUs (tp=1 on one GPU);
5. the kernels' own tests (``tests/test_triton_key.py``, ``tests/test_sglang_kernels.py``), whose exhaustive
   rounding checks and real-vocabulary launches run on CUDA only;
6. the kernel benchmark (``sharded.triton_key.benchmark``).

Measured budget: at most 8 minutes on one H200 (see the page for each row's time).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from engines.versions import SGLANG_VERSION, VLLM_VERSION
from tpargmax.report.command import ROOT, cells, run_once
from tpargmax.report.page import LABELS, _failures, _table
from tpargmax.report.sampling import sampling_runs
from tpargmax.report.subjects import Run, Subject

TRAP = "tests.broken:tf32_matmul"
EXAMPLES = 60  # --max-examples per property: the whole record within 8 minutes on one H200
TRAP_RULE = "float32 logits from a TF32 matmul"
VERSIONED = ("torch", "triton", "hypothesis", "sglang")


def environment() -> dict[str, str]:
    """The device, driver, CUDA, and the versions that decide what the kernels do."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    count = torch.cuda.device_count()
    names = sorted({torch.cuda.get_device_name(i) for i in range(count)})
    try:
        smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(smi, capture_output=True, text=True, timeout=30).stdout.split("\n")[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        driver = "unknown (no nvidia-smi)"
    out = {"device": f"{count} x {', '.join(names)}", "driver": driver or "unknown", "cuda": str(torch.version.cuda)}
    for package in VERSIONED:
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def runs(gpus: int, no_triton: str | None, no_sglang: str | None) -> list[tuple[Run, str, str | None]]:
    """(run, where it runs, why it cannot run here or None) for every row of the page.  The samplers run, the
    built-in ones and the engines' but DFlash2's, which needs the whole of vLLM installed (and its dependencies)."""
    sim = "sim"
    builtins = [
        Subject("packed_key", "built-in", "one int64 key, one all_reduce"),
        Subject("vllm_pairs", "built-in", "vLLM's exchange, ties by id"),
        Subject("classic_gather", "built-in", "all-gather every logit, argmax"),
    ]
    triton = Subject("triton_key", "built-in (Triton)", "one fused pass per rank: cap, masks, NaN and ties, the key")
    sglang = (
        Subject("sglang_deferred_argmax", f"SGLang {SGLANG_VERSION}", "LogitsProcessor.deferred_argmax"),
        Subject("sglang_classic", f"SGLang {SGLANG_VERSION}", "gathered_softcap_logits, then argmax"),
    )
    out: list[tuple[Run, str, str | None]] = [
        (Run(tuple(builtins)), sim, None),
        (Run((triton,)), sim, no_triton),
        (
            Run((Subject("topk_pairs", "built-in", "k (value, id) pairs per rank"),), top_k=True, argmax="packed_key"),
            sim,
            None,
        ),
        (Run(sglang), sim, no_sglang),  # one head, so one run
        *(
            (replace(r, subjects=subjects, env=()), sim, subjects[0].why_not(has_vllm=True))
            for r in sampling_runs()
            if (subjects := tuple(s for s in r.subjects if "dflash2" not in s.spec))
        ),
        (
            Run(
                (Subject(TRAP, "broken on purpose", "float32 logits from a TF32 matmul: must fail"),),
                tests=("properties/test_equivalence.py", "-k", "test_token_exact"),
            ),
            sim,
            None,
        ),
        (Run(tuple(builtins)), f"torchrun:{gpus}", None),
    ]
    return out


def _launch(where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The launcher and the backend options for a row that runs ``where`` (``sim`` or ``torchrun:N``)."""
    if where == "sim":  # one process: --results-json sees only its own process's tests
        return (sys.executable, "-m", "pytest", "-p", "no:xdist"), ("--backend", "sim", "--device", "cuda")
    ranks = where.partition(":")[2]
    launcher = (sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}")
    return (*launcher, "-m", "properties.torchrun"), ("--device", "cuda")


def build(args: argparse.Namespace, log, save=lambda data: None) -> dict[str, Any]:
    """The record; ``save(data)`` after each row, so a run stopped part way keeps the rows it finished."""
    import torch

    from sharded.impls import why_unavailable

    started = time.monotonic()
    gpus = torch.cuda.device_count()
    no_triton, no_sglang = why_unavailable("triton_key"), why_unavailable("sglang_deferred_argmax")
    data: dict[str, Any] = {
        "title": "The suite on a GPU",
        "command": "scripts/gpu_check" + (f" --examples {args.examples}" if args.examples != EXAMPLES else ""),
        "environment": environment(),
        "budget": {"examples": args.examples, "profile": "ci (derandomised)"},
        "rows": [],
        "benchmark": [],
    }

    def so_far() -> None:
        save({**data, "seconds": round(time.monotonic() - started), "unfinished": True})

    for run, where, why_not in runs(gpus, no_triton, no_sglang):
        log(f"{', '.join(s.label for s in run.subjects)} on {where}, {time.monotonic() - started:.0f} s so far")
        row_started = time.monotonic()
        launcher, options = _launch(where)
        entries = (
            []
            if why_not
            else run_once(
                run, args.examples, Path(args.repro_dir), args.row_timeout, log, launcher=launcher, where=options
            )
        )
        for subject in run.subjects:
            row = {
                "name": subject.label,
                "kind": subject.kind,
                "note": subject.note,
                "where": f"NCCL group, tp {where.partition(':')[2]}"
                if where.startswith("torchrun")
                else "simulated group",
                "option": list(run.option(subject)),
                "seconds": round(time.monotonic() - row_started),
                "cells": {} if why_not else cells(entries, run, subject),
            }
            data["rows"].append({**row, "skipped": why_not} if why_not else row)
        so_far()
    data["kernel_tests"] = kernel_tests(log)
    so_far()
    if not args.no_bench and no_triton is None:
        log(f"benchmark, {time.monotonic() - started:.0f} s so far")
        from sharded.triton_key import benchmark

        extra = None
        if no_sglang is None:
            from engines.sglang.wheel.kernels import kernel_argmax

            extra = {"SGLang softcap_row_argmax": kernel_argmax}
        data["benchmark"] = benchmark(extra=extra)
    data["seconds"] = round(time.monotonic() - started)
    return data


KERNEL_TESTS = ("tests/test_triton_key.py", "tests/test_sglang_kernels.py")


def kernel_tests(log) -> dict[str, Any]:
    """The kernels' own tests on this GPU: pytest's summary line, and each failed test's id and reason."""
    log("the kernels' own tests")
    command = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-rfE"]
    wide = {**os.environ, "COLUMNS": "400"}  # pytest cuts each summary line to the terminal's width
    done = subprocess.run([*command, *KERNEL_TESTS], cwd=ROOT, env=wide, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines() or ["(no output)"]
    # "FAILED id - message": the id and pytest's one-line reason (the first line of the error, cut to fit)
    failed = [line.split(" ", 1)[1] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return {"summary": lines[-1].strip("= "), "failed": failed, "status": done.returncode}


def trap_caught(data: dict[str, Any]) -> bool:
    """Whether the TF32 trap failed token-exactness for its rule (what it is there to show)."""
    row = next((r for r in data["rows"] if r["name"] == TRAP), None)
    cell = (row or {}).get("cells", {}).get("test_token_exact", {})
    return any(TRAP_RULE in f["rule"] for f in cell.get("failures", []))


def render(data: dict[str, Any]) -> str:
    """The page, from the JSON alone."""
    env, budget = data["environment"], data["budget"]
    failures = _failures(data)
    numbers: dict[tuple[str, str], list[str]] = {}
    for number, row, test, _ in failures:
        numbers.setdefault((row["name"], test), []).append(number)
    out = [
        f"# {data['title']}",
        "",
        *(
            ["**Unfinished:** the run stopped after the rows below; what is missing did not run.", ""]
            if data.get("unfinished")
            else []
        ),
        f"Generated by `{data['command']}` in {data['seconds']} s. Every row is one run of the property suite with",
        f"`--device cuda`, Hypothesis profile {budget['profile']}, `--max-examples {budget['examples']}`",
        "plus the pinned edge cases. A cell reads **pass**, **skip** or a failure number, explained under",
        "[Failures](#failures) with its rule, case and replay command.",
        "",
        "| | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in env.items()),
        "",
    ]
    for where in dict.fromkeys(r["where"] for r in data["rows"]):
        rows = [r for r in data["rows"] if r["where"] == where and r["cells"]]
        if rows:
            out += [f"## On the {where}", "", *_table(rows, numbers), ""]
    not_run = [r for r in data["rows"] if r.get("skipped")]
    if not_run:
        out += ["Not run: " + "; ".join(f"`{r['name']}` ({r['skipped']})" for r in not_run), ""]
    trap = "caught, for its rule" if trap_caught(data) else "**not caught**: the suite lost its power on this GPU"
    out += [f"TF32 trap (`{TRAP}`): {trap}.", "", "## Subjects", ""]
    out += [f"- `{r['name']}` ({r['kind']}, {r['seconds']} s): {r['note']}" for r in data["rows"]]
    out += ["", "## Failures", ""] + ([] if failures else ["None.", ""])
    for number, row, test, fail in failures:
        out += [f"### {number}: `{row['name']}`, {LABELS.get(test, test)}", "", f"- **Rule:** {fail['rule']}"]
        out += [f"- **Case:** `{fail['case']}`"] if fail.get("case") else []
        replay = f"tpargmax repro {fail['repro_file']}" if fail.get("repro_file") else fail.get("replay")
        out += [f"- **Replay:** `{replay}`"] if replay else []
        out += [f"  - {line}" for line in fail.get("details", []) if line and not line.startswith("property:")]
        out.append("")
    tests = data.get("kernel_tests")
    if tests:
        out += ["## The kernels' own tests", "", f"`pytest {' '.join(KERNEL_TESTS)}`: {tests['summary']}", ""]
        for test in tests["failed"]:
            name, _, why = test.partition(" - ")
            out.append(f"- failed: `{name}`" + (f": {why}" if why else ""))
        out += [""] if tests["failed"] else []
    if data["benchmark"]:
        columns = list(data["benchmark"][0])
        out += ["## Kernel times per rank shard (µs, CUDA events)", "", "| " + " | ".join(columns) + " |"]
        out += ["|" + "---|" * len(columns)]
        out += ["| " + " | ".join(str(b[c]) for c in columns) + " |" for b in data["benchmark"]]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def install_wheel(wheel: str, log) -> str:
    """Unpack a wheel (a zip of the package and its ``.dist-info``) into a temporary directory, for PYTHONPATH.

    Unpacked, not pip-installed: SGLang's wheel is built for one CPython (``cp311``), and only its pure-Python
    kernel files are used, never its compiled parts or its dependencies.
    """
    target = tempfile.mkdtemp(prefix="tpargmax-wheel-")
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    log(f"unpacking {wheel} into {target}")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/conformance/gpu.md", help="the page (its JSON goes beside it)")
    parser.add_argument("--repro-dir", default="repro/gpu", help="where each failure's repro file goes")
    parser.add_argument(
        "--examples", type=int, default=EXAMPLES, help="--max-examples per property (default %(default)s)"
    )
    parser.add_argument("--row-timeout", type=float, default=240.0, help="seconds one row may take")
    parser.add_argument("--sglang-wheel", help="install this sglang wheel (no dependencies) for the run first")
    parser.add_argument("--vllm-files", help="vLLM's Gumbel file as --pack-vllm wrote it, for the sampler rows")
    parser.add_argument(
        "--pack-vllm",
        metavar="DIR",
        help=f"where vLLM {VLLM_VERSION} is installed: write its Gumbel file to DIR and exit",
    )
    parser.add_argument(
        "--pack-sglang",
        metavar="WHEEL",
        help=f"write beside SGLang {SGLANG_VERSION}'s WHEEL a zip of the files the run loads, for --sglang-wheel, "
        "and exit",
    )
    parser.add_argument("--no-bench", action="store_true", help="leave the benchmark out")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    import torch

    if args.pack_vllm:
        from engines.vllm.wheel.triton_files import pack

        try:
            written = pack(Path(args.pack_vllm))
        except ValueError as error:
            print(f"{parser.prog}: {error}", file=sys.stderr)
            return 2
        print("\n".join(map(str, written)))
        return 0
    if args.pack_sglang:
        from engines.sglang.wheel.runtime import pack as pack_sglang

        try:
            print(pack_sglang(Path(args.pack_sglang)))
        except ValueError as error:
            print(f"{parser.prog}: {error}", file=sys.stderr)
            return 2
        return 0
    if not torch.cuda.is_available():
        print(f"{parser.prog}: needs a CUDA device; torch {torch.__version__} sees none here", file=sys.stderr)
        return 2
    extra = [install_wheel(args.sglang_wheel, log)] if args.sglang_wheel else []
    extra += [str(Path(args.vllm_files).resolve())] if args.vllm_files else []
    for path in extra:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [path, os.environ.get("PYTHONPATH")]))
        sys.path.insert(0, path)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # A run stopped by SIGTERM (`timeout`, a job's limit) unwinds, so the row running stops its processes too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(data: dict[str, Any]) -> None:
        out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        out.write_text(render(data), encoding="utf-8")

    data = build(args, log, save)
    save(data)
    log(f"wrote {out} and {out.with_suffix('.json')} in {data['seconds']} s")
    builtins_failed = any(
        c["outcome"] == "failed" for r in data["rows"] if r["kind"].startswith("built-in") for c in r["cells"].values()
    )
    kernels_failed = data["kernel_tests"]["status"] not in (0, 5)  # 5: all skipped (no Triton, no SGLang)
    return 1 if builtins_failed or kernels_failed or not trap_caught(data) else 0
