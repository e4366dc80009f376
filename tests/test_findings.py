"""Every failure on a conformance page is claimed by exactly one cause, consequence or reason, and no claim is stale.

Runs without the engine: the page's JSON and the findings are data.
"""

from __future__ import annotations

import json

import pytest

from engines import sampling_findings
from engines.findings import failure_key
from engines.vllm.findings import FINDINGS, PAGE
from tests.suite import ROOT
from tpargmax.report_page import _failures

PAGES = {PAGE: FINDINGS, sampling_findings.PAGE: sampling_findings.FINDINGS}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_failure_is_claimed_once_and_no_claim_is_stale(page):
    data = json.loads((ROOT / f"{page}.json").read_text(encoding="utf-8"))
    keys = [failure_key(row, test, fail) for _, row, test, fail in _failures(data)]
    claims = PAGES[page].claims()
    assert len(keys) == len(set(keys)), "two failures share a key"
    assert sorted(set(keys) - set(claims)) == [], "failures no cause or reason claims"
    assert sorted(set(claims) - set(keys)) == [], "claims of failures the page no longer has"


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
    from tpargmax import findings_page
    from tpargmax.report_page import _failures

    for fixed, expected in (("passed", (["F1"], [])), ("failed", ([], ["F1"]))):
        data = {"rows": [_row("a", "failed", "r1"), _row("a (corrected)", fixed, "r1", corrects="a")]}
        keys = ("a-r1",) + (("a (corrected)-r1",) if fixed == "failed" else ())
        findings = _findings(keys)
        assert findings_page.removes(data, _failures(data), findings.claims(), findings.causes[0]) == expected


def test_a_failure_claimed_twice_is_an_error():
    with pytest.raises(ValueError, match="claimed by both C0 and C1"):
        _findings(("k",), ("k",)).claims()
