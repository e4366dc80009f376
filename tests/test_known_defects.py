"""The model of vLLM's local path that ``--baseline`` checks a build's failures against
(engines/vllm/causes/known_defects.py): with every known defect in place it answers as vLLM 0.32.0 itself did on the
cases its page recorded, with each corrected it departs where that cause does, and with none it is the path of
the corrections but for vLLM's merge in rank order.  Without vLLM: the page's recorded answers are the evidence."""

from __future__ import annotations

import json

import pytest

from engines.versions import vllm_page
from engines.vllm.causes import known_defects
from properties.argmax.checks import check_token_exact
from properties.argmax.diagnosis import TIE_BY_RANK
from properties.cases.text import parse_case
from properties.failures import PropertyFailure
from properties.harness.runner import prepare
from sharded.impls import load_impl
from tests.suite import ROOT

V1_CASE = "Case(batch=4, hidden=5, vocab=1010, tp=2, added=16, seed=9, ties=('added_tie',))"


def rule_on(defects: str, case: str) -> str | None:
    """The rule the model keeping ``defects`` breaks in token-exact equality on ``case``, or None."""
    impl = load_impl(f"engines.vllm.causes.known_defects:{defects}")
    try:
        check_token_exact(impl, prepare(parse_case(case), "sim"))
    except PropertyFailure as exc:
        return str(exc).splitlines()[0].strip("[]")
    return None


def recorded(test: str) -> list[tuple[str, str]]:
    """(case, rule) of each failure 0.32.0's page recorded for vLLM's layer in ``test``."""
    data = json.loads((ROOT / f"{vllm_page('0.32.0')}.json").read_text(encoding="utf-8"))
    (row,) = [r for r in data["rows"] if r["name"] == "vllm"]
    return [(f["case"], f["rule"]) for f in row["cells"][test]["failures"]]


def test_with_every_defect_the_model_answers_as_the_release_did_on_its_page():
    cases = recorded("test_token_exact")
    assert cases
    for case, rule in cases:
        assert rule_on("with_V1_V3_V4", case) == rule, case


def test_each_cause_corrected_leaves_the_others():
    assert rule_on("with_V1", V1_CASE).startswith("added id mapped to the wrong global id")
    assert rule_on("with_V3_V4", V1_CASE) == TIE_BY_RANK  # V1 corrected: vLLM's merge by rank is what is left
    assert rule_on("with_none", "Case(batch=4, hidden=5, vocab=1010, tp=2, seed=9)") is None


def test_a_model_is_named_by_the_defects_it_keeps():
    assert known_defects.with_V1_V4.__name__ == "with_V1_V4"
    for wrong in ("with_V4_V1", "with_V2", "with_", "local"):
        with pytest.raises(AttributeError):
            getattr(known_defects, wrong)
    assert known_defects.subsets(("V1", "V3"))[0] == frozenset()  # fewest first
