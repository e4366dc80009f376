"""The published samplers' page: what ``tpargmax report --page sampling`` renders from its JSON, a row for every
subject, backed by repro files that still fail where the engines are installed.

The page and its JSON are checked on any machine; replaying needs the opt-in environment (``tpargmax
install-samplers``), and skips without it with that command as the reason.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
import torch

from engines import sampling_page
from engines.sglang.subjects import sampling as sglang_sampling
from engines.versions import SGLANG_VERSION, VLLM_VERSION, vllm_release, vllm_releases
from engines.versions import sampling_page as sampling_page_of
from engines.vllm.releases import findings_spec
from engines.vllm.wheel import triton_files
from properties.repro import records as repro
from tests.suite import ROOT, run_script
from tpargmax.report import findings as findings_page
from tpargmax.report import sampling as sampling_rows
from tpargmax.report.page import render

# each vLLM release's samplers' page: the default release's, and a later one's, whose rows are vLLM's and the built-ins
PAGES = {release: ROOT / f"{sampling_page_of(release)}.md" for release in vllm_releases()}
DATA = {release: json.loads(page.with_suffix(".json").read_text(encoding="utf-8")) for release, page in PAGES.items()}


def _failures(release: str) -> list[tuple[dict, dict]]:
    rows = DATA[release]["rows"]
    return [(row, fail) for row in rows for cell in row["cells"].values() for fail in cell["failures"] if fail["case"]]


def _missing(release: str) -> str | None:
    """Why this page's failures cannot be replayed here: its engines are not installed, or another vLLM is."""
    if vllm_release() != release:
        return f"the page of vLLM {release}'s samplers replays where that release is installed"
    return triton_files.why_unavailable() or (sglang_sampling.why_unavailable() if release == VLLM_VERSION else None)


MISSING = _missing(VLLM_VERSION)


@pytest.mark.parametrize("release", vllm_releases())
def test_the_page_is_what_the_report_renders_from_its_json(release):
    page = PAGES[release]
    assert page.read_text(encoding="utf-8") == render(DATA[release]), (
        f"{page} is stale: regenerate it with `tpargmax report --render {page.with_suffix('.json')} --out {page}`"
    )


@pytest.mark.parametrize("release", vllm_releases())
def test_every_subject_has_a_row_that_ran(monkeypatch, release):
    """Every subject of that release's runs has a row; each ran, but SGLang's where the release's environment has
    no SGLang (a later release's: its page says so)."""
    monkeypatch.setattr(sampling_rows, "vllm_release", lambda: release)
    subjects = {s.label for run in sampling_rows.sampling_runs() for s in run.subjects}
    rows = {row["name"]: row for row in DATA[release]["rows"]}
    assert sorted(subjects - set(rows)) == []
    unrun = [name for name in subjects if not rows[name]["cells"]]
    assert unrun == [] if release == VLLM_VERSION else all(name.startswith("sglang_") for name in unrun), unrun


@pytest.mark.parametrize("release", vllm_releases())
def test_every_failure_with_a_case_has_its_repro_file(release):
    for _, fail in _failures(release):
        record, inputs = repro.load(ROOT / fail["repro_file"])
        assert (record["rule"], record["case"]) == (fail["rule"], fail["case"]), fail["repro_file"]


@pytest.mark.parametrize("release", vllm_releases())
def test_the_failures_still_fail_on_replay_with_the_rule_they_recorded(release):
    if _missing(release):
        pytest.skip(_missing(release))
    files = sorted({fail["repro_file"] for _, fail in _failures(release)})
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    command = [sys.executable, "-m", "tpargmax", "repro", *files, "--collective-timeout", "300"]
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 1, out.stdout + out.stderr
    for _, fail in _failures(release):
        assert f"STILL FAILING: [{fail['rule']}]" in out.stdout, fail["repro_file"]


SCRIPTS = sorted((ROOT / "docs" / "conformance" / "sampling").glob("*.py"))
# a later release's page keeps the scripts of the causes it adds in its own folder
LATER = {release: sorted((ROOT / sampling_page_of(release)).glob("*.py")) for release in vllm_releases()[1:]}


def test_every_standalone_script_is_a_causes_and_every_causes_exists():
    named = {cause.script for cause in sampling_page.CAUSES if cause.script}
    assert named == {str(path.relative_to(ROOT)) for path in SCRIPTS}
    for release, scripts in LATER.items():
        findings = findings_page.load({"findings": findings_spec(release, "sampling")})
        named = {cause.script for cause in findings.causes if cause.script and release in cause.script}
        assert named == {str(path.relative_to(ROOT)) for path in scripts}, release


# the hand-written reproductions: the samplers' and SGLang's page's (vLLM's are generated: tests/test_standalone.py)
HAND_WRITTEN = [
    *SCRIPTS,
    *(script for scripts in LATER.values() for script in scripts),
    *sorted((ROOT / "docs" / "conformance" / f"sglang-{SGLANG_VERSION}").glob("*.py")),
]
NEEDS_A_DEVICE = {
    "vllm_gumbel",
    "vllm_dflash2_cache_out_of_row",
    "vllm_dflash2_walk_inf_tie",
    "vllm_topp_triton_min_logit_dropped",
    "sglang_lilicorr_neg_inf_ids",
    "nan_row_argmax",
}


@pytest.mark.parametrize("script", HAND_WRITTEN, ids=[path.stem for path in HAND_WRITTEN])
def test_each_standalone_script_says_what_exit_2_means(script):
    doc = " ".join(ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))).split())
    assert "Exit 2, with one line saying what is missing, means it cannot be judged here" in doc, script.name


@pytest.mark.parametrize("script", HAND_WRITTEN, ids=[path.stem for path in HAND_WRITTEN])
def test_without_its_packages_a_script_says_so_in_one_line_and_exits_2(script):
    """Made so here, whatever this machine has: no torch, engine or Triton.  No traceback, no verdict."""
    fixture = ROOT / "tests" / "fixtures" / "without_engines"
    out = run_script(script, PYTHONPATH=str(fixture), WITHOUT="torch,vllm,sglang,triton")
    assert out.returncode == 2, out.stdout + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and ": cannot be judged here: torch, " in lines[0], out.stdout
    assert lines[0].endswith("not installed") and out.stderr == "", out.stdout + out.stderr


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the scripts judge on this machine's CUDA device")
@pytest.mark.parametrize("script", [p for p in HAND_WRITTEN if p.stem in NEEDS_A_DEVICE], ids=lambda p: p.stem)
def test_a_kernel_script_without_a_device_or_the_interpreter_exits_2(script):
    out = run_script(script)  # TRITON_INTERPRET taken out, and no CUDA device here
    assert out.returncode == 2, out.stdout + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    why = ": cannot be judged here: no CUDA device: run it with TRITON_INTERPRET=1 (on the CPU)"
    assert len(lines) == 1 and lines[0].endswith(why), out.stdout


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
@pytest.mark.parametrize("script", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_each_standalone_script_still_shows_its_cause(script):
    """Exit 1 while the engine's code has the defect (each script's docstring says so), with the engine alone."""
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    env.pop("PYTHONPATH", None)  # the engine's wheel, not the project
    out = subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True, text=True, timeout=1800
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
