"""The engines' published pages that ``tpargmax report --page`` writes beside their findings (tpu-inference's,
SGLang's, vllm-ascend's): each is what the report renders from its JSON, has a row that ran for every subject, a
repro file for every failure with a case, and a script for every cause that names one.  These need no engine."""

from __future__ import annotations

import pytest

from engines.ascend.causes import findings as ascend_findings
from engines.sglang.causes import findings as sglang_findings
from engines.tpu_inference.causes import findings as tpu_inference_findings
from properties.repro import records as repro
from tests.published import Published
from tests.suite import ROOT
from tpargmax.report.ascend import ascend_runs
from tpargmax.report.page import render
from tpargmax.report.sglang import sglang_runs
from tpargmax.report.subjects import tpu_inference_runs

PAGES = {  # page -> (its runs, its findings)
    tpu_inference_findings.PAGE: (tpu_inference_runs, tpu_inference_findings),
    sglang_findings.PAGE: (sglang_runs, sglang_findings),
    ascend_findings.PAGE: (ascend_runs, ascend_findings),
}
pages = pytest.mark.parametrize("page", sorted(PAGES), ids=lambda page: page.rsplit("/", 1)[-1])


@pages
def test_the_page_is_what_the_report_renders_from_its_json(page):
    published = Published(page)
    assert published.path.read_text(encoding="utf-8") == render(published.data), (
        f"{published.path} is stale: regenerate it with "
        f"`tpargmax report --render {published.path.with_suffix('.json')} --out {published.path}`"
    )


@pages
def test_every_subject_has_a_row_that_ran(page):
    subjects = {s.label for run in PAGES[page][0]() for s in run.subjects}
    rows = {row["name"]: row for row in Published(page).data["rows"]}
    assert sorted(subjects - set(rows)) == []
    assert [name for name in subjects if not rows[name]["cells"]] == []


@pages
def test_every_failure_with_a_case_has_its_repro_file(page):
    for _, fail in Published(page).failures:
        record, _ = repro.load(ROOT / fail["repro_file"])
        assert (record["rule"], record["case"]) == (fail["rule"], fail["case"]), fail["repro_file"]


@pages
def test_every_standalone_script_is_a_causes_and_every_causes_exists(page):
    named = {cause.script for cause in PAGES[page][1].CAUSES if cause.script}
    assert named == {str(path.relative_to(ROOT)) for path in Published(page).scripts}
