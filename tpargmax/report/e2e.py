"""The vLLM page's "End to end" section: the engine running speculative decoding, switch on and off.

:func:`run` runs the end-to-end properties (``properties/test_e2e.py``, as ``tpargmax e2e`` does) and every cause's
engine script (``EndToEnd.script``), and keeps their outcomes in the report's JSON under ``end_to_end``;
:func:`section` renders them, with each cause's reach from the findings, and is a pure function of the JSON.
``tpargmax report --rows "end to end"`` runs this section alone (with ``--merge``, into a saved report).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from itertools import groupby
from pathlib import Path
from typing import Any

from engines.findings import Findings
from engines.vllm.e2e.scenario import METHODS

ROW = "end to end"  # what --rows names it by
TESTS = {  # the properties, in the page's column order, and their headings
    "test_draft_tokens": "draft tokens = oracle",
    "test_lossless": "lossless",
    "test_same_drafts": "same drafts (on/off, tp 1/2)",
    "test_exact_acceptance": "exact draft: all accepted",
}
SCRIPT_TIMEOUT = 1800.0


def pytest_args(repro_dir: Path, results: Path) -> list[str]:
    """What the report's pytest run adds to its usual flags: ``tpargmax e2e``'s run, writing its results."""
    args = ["--e2e", "-p", "no:xdist", "--repro-dir", str(repro_dir), "--results-json", str(results)]
    return [*args, "properties/test_e2e.py"]


def run(root: Path, findings: Findings | None, run_pytest, keep, log) -> dict[str, Any]:
    """The section's data: the properties' outcomes by engine, and each engine script's exit status and output.
    ``run_pytest(args, log)`` runs pytest with ``args`` after the report's flags and returns its results;
    ``keep(path)`` moves a repro file into the page's repro folder and returns its path."""
    with tempfile.TemporaryDirectory(prefix="tpargmax-report-e2e-") as tmp:
        entries = run_pytest(pytest_args(Path(tmp) / "repro", Path(tmp) / "results.json"), log)
        cells: dict[str, dict[str, Any]] = {}
        for entry in entries:
            for fail in entry["failures"]:
                if fail.get("repro_file"):
                    fail["repro_file"] = keep(Path(fail["repro_file"]))
            engine = entry.get("nodeid", "").partition("[")[2].rstrip("]") or "(the run)"
            cell = {k: entry[k] for k in ("outcome", "failures", "skip_reason")}
            cells.setdefault(entry["test"], {})[engine] = cell
    scripts = {}
    for reach in findings.end_to_end if findings else ():
        if reach.script:
            log(f"  {reach.cause}: {reach.script}")
            started = time.monotonic()
            scripts[reach.cause] = _script(root / reach.script)
            log(f"    exit {scripts[reach.cause]['exit']} ({time.monotonic() - started:.0f} s)")
    return {"command": "tpargmax e2e", "cells": cells, "scripts": scripts}


def _script(path: Path) -> dict[str, Any]:
    """A script run as a user runs it, from its folder: its exit status and what it printed on stdout."""
    try:
        done = subprocess.run(
            [sys.executable, path.name], cwd=path.parent, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return {"exit": -1, "output": [f"no verdict within {SCRIPT_TIMEOUT:.0f} s"]}
    return {"exit": done.returncode, "output": [line for line in done.stdout.splitlines() if line.strip()][-6:]}


VERDICTS = {0: "agrees (exit 0)", 1: "**the cause is there** (exit 1)", 2: "not judged here (exit 2)"}


def section(data: dict[str, Any], findings: Findings | None) -> list[str]:
    """The section's Markdown; empty where the report has no end-to-end run, but for a release whose findings say why
    its engine cannot run at all (every cause's reach a reason: 0.33.0's CUDA wheel on a CPU)."""
    e2e = data.get("end_to_end")
    if not e2e:  # a build no page lists is not the release whose findings say why (it may hold CPU kernels)
        reaches = findings.end_to_end if findings and not data.get("baseline") else ()
        if not reaches or not all(reach.why for reach in reaches):
            return []
        out = ["## End to end", ""]
        for why, group in groupby(reaches, key=lambda reach: reach.why):
            out.append(f"- **{', '.join(r.cause for r in group)}**: not run: {why}")
        return [*out, ""]
    out = [
        "## End to end",
        "",
        f"vLLM's engine itself (`{e2e['command']}`): speculative decoding with `use_local_argmax_reduction` on and "
        "off, EAGLE3, EAGLE, a plain draft model and a plain draft with a vocabulary of its own "
        "(`draft_model_hetero`, `use_heterogeneous_vocab`), at tp 1 and 2, in float32 and bfloat16, on tiny models the "
        'suite writes so that every verdict is exact (docs/vllm.md, "End to end"). Each example loads new weights '
        "into the running engines and generates; a probe in every worker records what the draft's head was handed "
        "and returned, beside the acceptance counters vLLM keeps. Greedy speculative decoding is lossless, so a "
        "wrong draft token never shows in the output: only these show it. Every planted case runs first, pinned "
        "(winners across the whole id range, and maxima across ranks a float32 ulp apart, among them), then the drawn "
        "examples; an engine that dies is judged by "
        "what its heads returned before it did.",
        "",
        "| engine | " + " | ".join(TESTS.values()) + " |",
        "|---|" + "---|" * len(TESTS),
    ]
    failures: list[tuple[str, str, dict[str, Any]]] = []
    for engine in sorted({e for cells in e2e["cells"].values() for e in cells}, key=_order):
        row = []
        for test in TESTS:
            cell = e2e["cells"].get(test, {}).get(engine)
            if cell is None:
                row.append("")
            elif cell["outcome"] == "failed":
                failures += [(engine, test, f) for f in cell["failures"]]
                row.append(f"**E{len(failures)}**")
            else:
                row.append({"passed": "pass", "skipped": "skip"}[cell["outcome"]])
        out.append(f"| `{engine}` | " + " | ".join(row) + " |")
    out += ["", "Same drafts is one run per method and dtype, over its four engines.", ""]
    for n, (engine, test, fail) in enumerate(failures, 1):
        out += [f"- **E{n}** `{engine}`, {TESTS[test]}: {fail['rule']}"]
        out += [f"  - replay: `tpargmax repro {fail['repro_file']}`"] if fail.get("repro_file") else []
        out += [f"  - {line}" for line in fail.get("details", [])]
    out += [""] if failures else []
    if findings and findings.end_to_end:
        out += ["### The causes, end to end", "", "Whether the engine, serving a draft a user can run, reaches each."]
        out.append("")
        for why, group in groupby(findings.end_to_end, key=lambda reach: reach.why):  # causes of one reason: a line
            reaches = list(group)
            if why:
                out.append(f"- **{', '.join(r.cause for r in reaches)}**: not reached: {why}")
                continue
            for reach in reaches:
                ran = e2e["scripts"].get(reach.cause)
                verdict = "not run" if ran is None else VERDICTS.get(ran["exit"], f"exit {ran['exit']}")
                link = reach.script.removeprefix("docs/conformance/")  # from the page, which lies there
                out.append(f"- **{reach.cause}**: [`{Path(reach.script).name}`]({link}): {verdict}")
                out += [f"  - `` {line} ``" for line in (ran or {}).get("output", [])]  # the line may hold a backtick
        out.append("")
    return out


def _order(engine: str) -> tuple[int, int, str, str]:
    """Engines by dtype, method, tp, switch on first; a method's same-drafts run (``method-dtype``) after its four."""
    method, _, rest = engine.partition("-tp")
    tp, switch, dtype = rest.split("-") if rest else ("9", "", engine.rpartition("-")[2])
    method = method if rest else engine.rpartition("-")[0]
    rank = {name: n for n, name in enumerate(("float32", "bfloat16", *METHODS))}
    return (rank.get(dtype, 9), rank.get(method, 9), tp, {"on": "0", "off": "1"}.get(switch, "2"))
