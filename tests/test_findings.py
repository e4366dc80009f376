"""Every failure on a conformance page is claimed by exactly one cause, consequence or reason, and no claim is stale;
every cause is shown by a failure of the run or a standalone reproduction, or the page says it is not.

Runs without the engine: the page's JSON and the findings are data.  That each reproduction exits 1 with the engine
installed is tests/test_standalone.py's and tests/test_sampling_conformance.py's to check.
"""

from __future__ import annotations

import json
import re

import pytest

from engines.ascend.causes import findings as ascend_findings
from engines.findings import failure_key
from engines.sglang.causes import findings as sglang_findings
from engines.tpu_inference.causes import findings as tpu_inference_findings
from engines.versions import vllm_releases
from engines.vllm import releases
from engines.vllm.causes.findings import FINDINGS, PAGE
from tests.suite import ROOT
from tpargmax.report import findings as findings_page
from tpargmax.report.page import _failures

PAGES = {  # each listed release's two pages (0.32.0's claims: its causes' code and its file), then the others'
    found.page: found
    for release in vllm_releases()
    for found in (releases.findings(release, "vllm"), releases.findings(release, "sampling"))
} | {
    tpu_inference_findings.PAGE: tpu_inference_findings.FINDINGS,
    sglang_findings.PAGE: sglang_findings.FINDINGS,
    ascend_findings.PAGE: ascend_findings.FINDINGS,
}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_failure_is_claimed_once_and_no_claim_is_stale(page):
    data = json.loads((ROOT / f"{page}.json").read_text(encoding="utf-8"))
    keys = [failure_key(row, test, fail) for _, row, test, fail in _failures(data)]
    claims = PAGES[page].claims()
    assert len(keys) == len(set(keys)), "two failures share a key"
    assert sorted(set(keys) - set(claims)) == [], "failures no cause or reason claims"
    assert sorted(set(claims) - set(keys)) == [], "claims of failures the page no longer has"


def test_the_failures_a_finding_names_by_number_are_its_own_on_the_page_it_names():
    """0.32.0's texts name failures by number on 0.32.0's page ("0.32.0's F22"): a regenerated page renumbers them,
    and 0.33.0's page carries the texts as they are, so each number must be on that page and be the finding's."""
    data = json.loads((ROOT / f"{PAGE}.json").read_text(encoding="utf-8"))
    numbers = {number: failure_key(row, test, fail) for number, row, test, fail in _failures(data)}
    for item in (*FINDINGS.causes, *FINDINGS.reasons):
        parts = [item.why, getattr(item, "reaches", ""), *getattr(item, "evidence", ())]
        text = " ".join(parts + [c.title for c in getattr(item, "consequences", ())])
        refs = re.findall(r"\bF(\d+)(?: to F(\d+))?", text)
        assert not refs or "0.32.0's F" in text, f"{item.id} names failures without the page they are on"
        named = [f"F{n}" for first, last in refs for n in range(int(first), int(last or first) + 1)]
        assert [n for n in named if numbers.get(n) not in item.all_failures] == [], item.id


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_cause_is_shown_by_a_failure_of_the_run_or_a_reproduction(page):
    """A cause without evidence on the page is a claim the run did not show: a failure it claims on a row of the
    engine's own code (a corrected row runs the project's corrections too), or a script in the checkout that
    reproduces it with the engine alone."""
    data = json.loads((ROOT / f"{page}.json").read_text(encoding="utf-8"))
    keys = {failure_key(row, test, fail) for _, row, test, fail in _failures(data) if not row.get("corrects")}
    unshown = [cause.id for cause in PAGES[page].causes if not findings_page.shown(cause, keys)]
    assert unshown == [], f"causes with no failure on {page}.md and no reproduction: {unshown}"
    scripts = [cause.script for cause in PAGES[page].causes if cause.script]
    assert [s for s in scripts if not (ROOT / s).is_file()] == [], "reproductions named but not in the checkout"
    assert findings_page.NOT_SHOWN not in (ROOT / f"{page}.md").read_text(encoding="utf-8")


def test_a_cause_shown_by_nothing_reads_not_shown():
    from tpargmax.report.page import _failures

    data = {"rows": [_row("a", "failed", "r1")]}
    findings = _findings(("a-r1",), ())
    failures = _failures(data)
    text = "\n".join(findings_page.section(data, failures, findings, findings.claims()))
    assert text.count(findings_page.NOT_SHOWN) == 2, text  # the table's cell and the cause's own Failures line
    shown_by_a_corrected_row_only = {"rows": [*data["rows"], _row("a (corrected)", "failed", "r2", corrects="a")]}
    findings = _findings(("a-r1",), ("a (corrected)-r2",))
    failures = _failures(shown_by_a_corrected_row_only)
    text = "\n".join(findings_page.section(shown_by_a_corrected_row_only, failures, findings, findings.claims()))
    assert f"{findings_page.NOT_SHOWN}; corrected rows: F2" in text, text
    assert "| [C0](#c0) t | wrong only for inputs no shipped model produces | F1 |" in text, text


def _row(name, outcome, rule="", corrects=""):
    failures = [{"rule": rule, "repro_file": f"repro/x/{name}-{rule}.json"}] if outcome == "failed" else []
    row = {"name": name, "kind": "k", "note": "", "option": ["--impl", name], "env": {}}
    row["cells"] = {"test_token_exact": {"outcome": outcome, "failures": failures, "skip_reason": None}}
    return {**row, "corrects": corrects} if corrects else row


def _findings(*claims):
    from engines.findings import Cause, Findings

    causes = tuple(
        Cause(f"C{n}", "t", "w", "unreached", "r", (), "why", keys, correction="fix: x")
        for n, keys in enumerate(claims)
    )
    return Findings("E", "docs/e", causes)


def test_a_correction_is_proven_only_by_a_corrected_row_that_passes():
    from tpargmax.report import findings as findings_page
    from tpargmax.report.page import _failures

    for fixed, expected in (("passed", (["F1"], [])), ("failed", ([], ["F1"]))):
        data = {"rows": [_row("a", "failed", "r1"), _row("a (corrected)", fixed, "r1", corrects="a")]}
        keys = ("a-r1",) + (("a (corrected)-r1",) if fixed == "failed" else ())
        findings = _findings(keys)
        assert findings_page.removes(data, _failures(data), findings.claims(), findings.causes[0]) == expected


def test_a_failure_claimed_twice_is_an_error():
    with pytest.raises(ValueError, match="claimed by both C0 and C1"):
        _findings(("k",), ("k",)).claims()
