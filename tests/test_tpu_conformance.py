"""tpu-inference's published page: what ``tpargmax report --page tpu-inference`` renders from its JSON, a row for
every subject, backed by repro files, and a standalone reproduction that needs only jax and the wheel.

The page and its JSON are checked on any machine; replaying and the script's verdict need the opt-in environment
(``tpargmax install-tpu-inference``) and skip without it, with that command as the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engines.tpu_inference import adapter as tpu_inference
from engines.tpu_inference import findings as tpu_inference_findings
from properties.repro import records as repro
from tests.suite import ROOT, run_script
from tpargmax.report_page import render
from tpargmax.report_subjects import tpu_inference_runs

PAGE = ROOT / f"{tpu_inference_findings.PAGE}.md"
DATA = json.loads(PAGE.with_suffix(".json").read_text(encoding="utf-8"))
FAILURES = [
    (row, fail) for row in DATA["rows"] for cell in row["cells"].values() for fail in cell["failures"] if fail["case"]
]
MISSING = tpu_inference.why_unavailable()
SCRIPTS = sorted((ROOT / tpu_inference_findings.PAGE).glob("*.py"))


def test_the_page_is_what_the_report_renders_from_its_json():
    assert PAGE.read_text(encoding="utf-8") == render(DATA), (
        f"{PAGE} is stale: regenerate it with `tpargmax report --render {PAGE.with_suffix('.json')} --out {PAGE}`"
    )


def test_every_subject_has_a_row_that_ran():
    subjects = {s.label for run in tpu_inference_runs() for s in run.subjects}
    rows = {row["name"]: row for row in DATA["rows"]}
    assert sorted(subjects - set(rows)) == []
    assert [name for name in subjects if not rows[name]["cells"]] == []


def test_every_failure_with_a_case_has_its_repro_file():
    for _, fail in FAILURES:
        record, _ = repro.load(ROOT / fail["repro_file"])
        assert (record["rule"], record["case"]) == (fail["rule"], fail["case"]), fail["repro_file"]


def test_every_standalone_script_is_a_causes_and_every_causes_exists():
    named = {cause.script for cause in tpu_inference_findings.CAUSES if cause.script}
    assert named == {str(path.relative_to(ROOT)) for path in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_without_jax_a_script_says_so_in_one_line_and_exits_2(script):
    fixture = ROOT / "tests" / "fixtures" / "without_engines"
    out = run_script(script, PYTHONPATH=str(fixture), WITHOUT="jax,jaxlib,tpu_inference")
    lines = out.stdout.splitlines()
    assert out.returncode == 2 and len(lines) == 1 and out.stderr == "", out.stdout + out.stderr[-2000:]
    assert ": cannot be judged here: " in lines[0] and lines[0].endswith("not installed"), lines


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
@pytest.mark.parametrize("script", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_each_standalone_script_still_shows_its_causes(script):
    out = run_script(script)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_the_failures_still_fail_on_replay_with_the_rule_they_recorded():
    files = sorted({fail["repro_file"] for _, fail in FAILURES})
    command = [sys.executable, "-m", "tpargmax", "repro", *files, "--collective-timeout", "120"]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 1, out.stdout + out.stderr
    for _, fail in FAILURES:
        assert f"STILL FAILING: [{fail['rule']}]" in out.stdout, fail["repro_file"]
