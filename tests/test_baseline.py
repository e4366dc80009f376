"""``--baseline``: a build judged against the listed releases' known causes (engines/vllm/releases/baseline.py,
properties/harness/baseline.py).  A known cause claims a failure by subject, property and rule; the search goes on
past what it claims; only what is new fails the run.  Without vLLM: the project's variant ``trtllm_style`` carries
a listed page's cause (D3), and a broken path (tests/broken_builds.py) stands for a contributor's base build and
their change, its run recorded (``--baseline-record``) and the change judged against it."""

from __future__ import annotations

import json
import re

import pytest

from engines.versions import vllm_releases
from engines.vllm.releases.baseline import Baseline, answer, example_key, judged_against, releases_before, rule_class
from properties.argmax.diagnosis import NAN_NOT_MAX, TIE_HIGHER_RANK
from properties.argmax.faults import SIGNED_ZERO
from tests.suite import run_suite

V1_RULE = "added id mapped to the wrong global id: added id 1015 sits at row 517 of rank 1"
VLLM = ("--impl", "vllm", ())
PROPERTIES = (
    "properties/test_equivalence.py",
    "properties/test_input_errors.py",
    "--backend",
    "sim",
    "--heads",
    "base",
)
EXAMPLES = ("--max-examples", "10")  # the pinned cases and 10 more: the second bug is met among the pinned


@pytest.mark.parametrize(
    ("rule", "known_as"),
    [
        (V1_RULE, "added id mapped to the wrong global id"),
        ("raised on valid input: RemoteError: rank 0 of 2 raised IndexError: index 32 is out of bounds", None),
        ("raised on valid input: IndexError: index 32001 is out of bounds for dimension 0 with size 32001", None),
        ("AssertionError: vllm: id 16777217 came back as 16777216 (float-carried id?)", None),
        ("AssertionError: a non-monotone table, tie at (0, 1): a local path returns 1", None),
        ("bad input accepted: bias length mismatch", "bad input: bias length mismatch"),
        (
            "bad input (bias length mismatch) raised RuntimeError instead of ValueError",
            "bad input: bias length mismatch",
        ),
        (TIE_HIGHER_RANK, TIE_HIGHER_RANK),
    ],
)
def test_a_rule_is_known_by_what_the_case_does_not_decide(rule, known_as):
    known_as = (
        known_as
        or {
            "r": "raised on valid input: IndexError",
            "A": "id N came back as N (float-carried id?)"
            if "16777217" in rule
            else "a non-monotone table, tie at (…)",
        }[rule[0]]
    )
    assert rule_class(rule) == known_as


def test_a_build_is_judged_against_the_releases_at_or_before_it():
    assert releases_before("0.34.0.dev1+g0abc123") == ("0.33.0", "0.32.0")
    assert releases_before("0.33.0") == ("0.33.0", "0.32.0")
    assert releases_before("0.32.0") == ("0.32.0",)
    assert releases_before("0.31.0") == ("0.32.0",)  # older than every page: the oldest is what there is
    assert judged_against("0.34.0.dev1") == "0.33.0" and judged_against("0.33.0") is judged_against(None) is None


def test_a_known_cause_claims_its_subject_property_and_rule_only():
    known = Baseline.of(("0.32.0",))
    shm = ("--impl", "vllm", (("TPARGMAX_VLLM_SHM", "1"),))
    assert known.claim([VLLM], "test_token_exact", {"rule": V1_RULE}) == "V1"
    assert known.claim([VLLM], "test_token_exact", {"rule": V1_RULE.replace("1015", "7")}) == "V1"
    assert known.claim([VLLM], "test_token_exact", {"rule": TIE_HIGHER_RANK}) is None  # another mechanism: new
    assert known.claim([VLLM], "test_determinism", {"rule": V1_RULE}) is None  # a property it never failed
    assert known.claim([("--impl", "packed_key", ())], "test_token_exact", {"rule": V1_RULE}) is None  # another subject
    assert known.claim([shm], "test_token_exact", {"rule": V1_RULE}) is None  # another build of the subject


def test_a_recorded_example_is_known_by_its_answer_only(tmp_path):
    """A release's own run keys each failing example by case and answer: the same case answered otherwise is new."""
    seen = {"rule": TIE_HIGHER_RANK, "details": ["expected [3]", "actual [7]"], "replay": "python -m ... CASE"}
    record = {"release": "0.32.0", "answers": {example_key("test_token_exact", [VLLM], seen["replay"]): answer(seen)}}
    (tmp_path / "run.json").write_text(json.dumps(record))
    known = Baseline.of(("0.32.0",), runs=(tmp_path / "run.json",))
    assert known.claim([VLLM], "test_token_exact", seen) == "the run recorded in run.json"
    assert known.claim([VLLM], "test_token_exact", {**seen, "details": ["expected [3]", "actual [8]"]}) is None
    assert known.claim([VLLM], "test_token_exact", {**seen, "replay": "python -m ... ANOTHER"}) is None


def test_a_recorded_run_is_known_and_what_a_later_build_adds_is_new(tmp_path):
    """A contributor's flow: record the base build's run, then judge a change against it.  The second build keeps
    the first's bug (ids past the logits vocabulary) and adds one behind it (ties to the higher rank).  Beside it,
    a property that is no Hypothesis test fails for a page's cause alone (trtllm_style's id 2**24 + 1, D3): an
    expected failure naming it."""
    run = tmp_path / "run.json"
    subject = ("--impl", "tests.broken_builds:two_builds,trtllm_style", *PROPERTIES, *EXAMPLES, "-rx")
    subject += ("-k", "(token_exact and two_builds) or (float32 and trtllm)")
    recorded = run_suite("--baseline", "0.32.0", "--baseline-record", str(run), *subject)
    assert recorded.returncode == 0 and f"recorded in {run}: " in recorded.stdout, recorded.stdout[-3000:]
    answers = json.loads(run.read_text())["answers"]  # each failing example's case and answer: the bug is there
    assert answers and all(json.loads(key)[0] == "test_token_exact" for key in answers)

    same = run_suite("--baseline", str(run), *subject)
    assert same.returncode == 0, same.stdout[-3000:]
    assert "known from the run recorded in run.json (its cause not read): " in same.stdout
    assert "1 xfailed" in same.stdout and "known cause D3" in same.stdout and "D3 met: 1 failure(s)" in same.stdout
    assert "new: none" in same.stdout
    assert "V1 " not in same.stdout  # none of vLLM's subjects ran: its causes are not judged here

    later = run_suite("--baseline", str(run), *subject, BROKEN_SECOND_BUG="1")
    assert later.returncode == 1 and "known from the run recorded in run.json" in later.stdout, later.stdout[-3000:]
    new = later.stdout.partition("NEW: ")[2]
    assert "repro file: " in new and any(f"[{r}" in new for r in (TIE_HIGHER_RANK, SIGNED_ZERO, NAN_NOT_MAX)), new
    assert "[id beyond the logits vocabulary returned" not in new


def test_a_baseline_no_page_lists_is_a_usage_error_naming_what_there_is():
    from types import SimpleNamespace

    from properties.harness import baseline as plugin

    config = SimpleNamespace(getoption=lambda name: "0.31.0", option=SimpleNamespace(), stash={})
    listed = re.escape(", ".join(vllm_releases()))
    with pytest.raises(pytest.UsageError, match=rf"--baseline 0\.31\.0: a listed vLLM release \({listed}\)"):
        plugin.pytest_configure(config)


def test_a_model_of_the_release_claims_what_it_fails_alike():
    """A failure of vLLM's layer that no page claims is its known causes' where the release's model keeping some of
    them (engines/vllm/causes/known_defects.py) fails the same example alike; the fewest are named, and an example the
    model answers otherwise stays new."""
    from properties.failures import PropertyFailure
    from properties.harness import baseline as plugin
    from sharded.impls import Impl

    def inner(impl, answers):
        got = answers.get(impl.spec.rpartition(":")[2], 3)
        raise PropertyFailure(
            f"[chose a non-maximal logit]\n  implementation: {impl.spec} on a gloo group\n  got {got}"
        )

    build = Impl("vllm", inner)
    for answers, claim in (
        ({"vllm": 7, "with_V3": 7, "with_V1_V3": 7}, "modelled: V3"),
        ({"vllm": 3}, "modelled: none"),  # the release's path itself, every cause corrected
        ({"vllm": 9}, None),
    ):
        try:
            inner(build, answers)
        except PropertyFailure as exc:
            seen = plugin.failure(exc, None)
        assert plugin._modelled(inner, (), {"impl": build, "answers": answers}, seen) == claim
    assert plugin._modelled(inner, (), {"impl": Impl("packed_key", inner), "answers": {}}, seen) is None  # no model
