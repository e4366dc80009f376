"""SGLang's published page: what ``tpargmax report --page sglang`` renders from its JSON, a row for every subject,
backed by repro files, and a standalone reproduction of each cause that needs only the wheel (and, for the deferred
argmax, Triton).

The page and its JSON are checked on any machine; the scripts' verdicts need the wheel and skip without it, with the
install command as the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engines.sglang import dflash_draft
from engines.sglang import findings as sglang_findings
from properties.repro import records as repro
from tests.suite import ROOT, run_script
from tpargmax.report_page import render
from tpargmax.report_sglang import sglang_runs

PAGE = ROOT / f"{sglang_findings.PAGE}.md"
DATA = json.loads(PAGE.with_suffix(".json").read_text(encoding="utf-8"))
FAILURES = [
    (row, fail) for row in DATA["rows"] for cell in row["cells"].values() for fail in cell["failures"] if fail["case"]
]
GREEDY = ROOT / sglang_findings.PAGE / "greedy_paths.py"  # torch and the wheel alone
MISSING = dflash_draft.why_unavailable()


def test_the_page_is_what_the_report_renders_from_its_json():
    assert PAGE.read_text(encoding="utf-8") == render(DATA), (
        f"{PAGE} is stale: regenerate it with `tpargmax report --render {PAGE.with_suffix('.json')} --out {PAGE}`"
    )


def test_every_subject_has_a_row_that_ran():
    subjects = {s.label for run in sglang_runs() for s in run.subjects}
    rows = {row["name"]: row for row in DATA["rows"]}
    assert sorted(subjects - set(rows)) == []
    assert [name for name in subjects if not rows[name]["cells"]] == []


def test_every_failure_with_a_case_has_its_repro_file():
    for _, fail in FAILURES:
        record, _ = repro.load(ROOT / fail["repro_file"])
        assert (record["rule"], record["case"]) == (fail["rule"], fail["case"]), fail["repro_file"]


def test_every_standalone_script_is_a_causes_and_every_causes_exists():
    named = {cause.script for cause in sglang_findings.CAUSES if cause.script}
    assert named == {str(path.relative_to(ROOT)) for path in (ROOT / sglang_findings.PAGE).glob("*.py")}


def test_without_the_wheel_the_greedy_script_says_so_in_one_line_and_exits_2():
    fixture = ROOT / "tests" / "fixtures" / "without_engines"
    out = run_script(GREEDY, PYTHONPATH=str(fixture), WITHOUT="sglang")
    lines = out.stdout.splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr[-2000:]
    assert lines[0].startswith("greedy_paths: cannot be judged here: ") and lines[0].endswith("not installed"), lines


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_the_greedy_script_still_shows_its_causes():
    out = run_script(GREEDY)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("IndexError: max(): Expected reduction dim 1 to have non-zero size.") == 2, out.stdout
    assert "[128, 128] on ranks 0, 1 (torch.argmax: 70)" in out.stdout, out.stdout
    assert "[64, 64] on ranks 0, 1 (torch.argmax: 0)" in out.stdout, out.stdout


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_the_greedy_paths_failures_still_fail_on_replay_with_the_rule_they_recorded():
    """Every failure of a row that torch alone runs (the kernels' rows need Triton: `TRITON_INTERPRET=1 tpargmax
    repro FILE` on a CPU)."""
    torch_only = [(row, fail) for row, fail in FAILURES if not row.get("env")]
    files = sorted({fail["repro_file"] for _, fail in torch_only})
    command = [sys.executable, "-m", "tpargmax", "repro", *files, "--collective-timeout", "120"]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 1, out.stdout + out.stderr
    for _, fail in torch_only:
        assert f"STILL FAILING: [{fail['rule']}]" in out.stdout, fail["repro_file"]
