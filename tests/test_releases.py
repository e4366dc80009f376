"""More than one vLLM release: which one a page is for, which classes it offers, and what became of the previous
release's causes (``tpargmax.report.changes``), without vLLM installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engines import versions
from engines.findings import INHERITED, Cause, Findings, Patch, Reason, applied
from engines.vllm import releases
from engines.vllm.causes.findings import FINDINGS
from engines.vllm.releases import findings_spec
from engines.vllm.subjects import models
from engines.vllm.wheel.build import shipped
from tpargmax.report import changes as release_changes
from tpargmax.report import command as report


class Base:
    def method(self) -> str:
        return "base"


class Child(Base):
    pass


def test_a_patch_of_an_inherited_method_is_taken_back_off():
    """A class that inherits the patched method (MuseSpark1x inherits the mixin's ``get_top_tokens``) has it of its
    own only while the patch is in place; after it, the base class's again."""
    patch = Patch(f"{__name__}:Child.method", lambda self: "patched")
    assert patch.put()[2] is INHERITED
    del Child.method
    with applied([patch]):
        assert Child().method() == "patched" and Base().method() == "base"
    assert "method" not in vars(Child) and Child().method() == "base"
    with pytest.raises(ValueError, match="does not exist in this version"):
        Patch(f"{__name__}:Child.absent", lambda self: None).owner()


@pytest.mark.parametrize("installed", [None, *versions.vllm_releases()])
def test_each_release_has_its_page_findings_and_repro_folder(monkeypatch, installed):
    monkeypatch.setattr(versions, "installed_vllm", lambda: installed)
    title, findings, repro, packages = report.page_spec("vllm")
    release = installed or versions.VLLM_VERSION
    assert title == f"vLLM {release} conformance" and repro == f"repro/vllm-{release}"
    assert findings == findings_spec(release) and packages == (() if release == versions.VLLM_VERSION else ("vllm",))
    title, findings, repro, packages = report.page_spec("sampling")  # the samplers' page follows vLLM's samplers
    if release == versions.VLLM_VERSION:
        assert report.page_spec("sampling") == report.PAGES["sampling"]
    else:
        assert title.endswith(f", with vLLM {release}") and repro == f"repro/sampling-vllm-{release}"
        assert findings == findings_spec(release, "sampling") and "vllm" in packages
    for page in ("tpu-inference", "sglang"):  # nor do the TPU and SGLang pages
        assert report.page_spec(page) == report.PAGES[page]


def test_rows_are_selected_by_part_of_their_name_or_by_one_name_exactly():
    assert report.selected("vllm (corrected)", ["vllm"]) and report.selected("vllm (corrected)", ["=vllm (corrected)"])
    assert report.selected("vllm", ["=vllm"]) and not report.selected("vllm_topk", ["=vllm", "corrected"])


def test_a_build_no_page_lists_is_judged_against_the_release_before_it(monkeypatch, capsys):
    """A contributor's 0.34.0.dev1 gets its own page, claimed by 0.33.0's causes; the samplers' page is written for a
    listed release only, and says so before anything runs."""
    monkeypatch.setattr(versions, "installed_vllm", lambda: "0.34.0.dev1")
    title, findings, repro, packages = report.page_spec("vllm")
    assert title == "vLLM 0.34.0.dev1 conformance" and findings == findings_spec("0.33.0")
    assert repro == "repro/vllm-0.34.0.dev1" and packages == ("vllm",)
    known = ", ".join(versions.vllm_releases())
    with pytest.raises(ValueError, match=f"vLLM 0.34.0.dev1 is installed, and the samplers' page knows {known}"):
        report.page_spec("sampling")
    from tpargmax.cli import main

    assert main(["report", "--page", "sampling", "--rows", "nothing"]) == 2
    assert "vLLM 0.34.0.dev1 is installed" in capsys.readouterr().err


def test_a_class_is_offered_only_by_the_releases_that_ship_it():
    assert shipped("", "0.32.0") and shipped("0.33.0", "0.33.0") and not shipped("0.33.0", "0.32.0")
    assert shipped("0.33.0", "0.40.1") and not shipped("0.40.0", "0.33.0")
    later = {name: subject.since for name, subject in models.EVERY.items() if subject.since}
    assert set(later.values()) <= set(versions.vllm_releases()[1:]), later
    assert {"MuseSpark1xForCausalLM", "DFlash2BeamForCausalLM", "Step5MTP"} <= set(later)
    assert models.RELEASE == versions.vllm_release()
    assert set(models.SUBJECTS) == {n for n, s in models.EVERY.items() if s.shipped_in(models.RELEASE)}
    gone = models.EVERY["MuseSpark1xForCausalLM"]  # renamed in 0.34.0: offered from its since to its until
    assert gone.shipped_in("0.33.0") and not gone.shipped_in("0.34.0") and not gone.shipped_in("0.32.0")
    if models.RELEASE in versions.vllm_releases():  # another build offers what it holds (tests/test_vllm_builds.py)
        assert bool(set(later) & set(models.SUBJECTS)) == (models.RELEASE != versions.VLLM_VERSION)


def test_0_33_0_carries_every_cause_of_0_32_0():
    """Each of 0.32.0's causes is on 0.33.0's page, with its reproduction; what 0.33.0 adds comes after them."""
    previous = release_changes.previous_of(releases.vllm_0_33_0)
    assert previous is releases.findings("0.32.0", "vllm") and releases.vllm_0_33_0.page == versions.vllm_page("0.33.0")
    assert [c.id for c in previous.causes] == [c.id for c in FINDINGS.causes]  # the code's, claiming its rows
    carried = releases.vllm_0_33_0.causes[: len(FINDINGS.causes)]
    assert [(c.id, c.script, c.evidence) for c in carried] == [(c.id, c.script, c.evidence) for c in FINDINGS.causes]
    assert {e.cause for e in releases.vllm_0_33_0.end_to_end} == {c.id for c in releases.vllm_0_33_0.causes}


# the next release after the latest listed, as its file alone: the latest's V1 carried (with a failure of its page),
# one cause of its own with its script's entry
LATEST = versions.vllm_releases()[-1]
NEXT_VERSION = "0.{}.0".format(int(LATEST.split(".")[1]) + 1)
NEXT = f"""\
previous = "{LATEST}"
[install]
gpu_only = ["torch", "flashinfer-python"]
triton = "3.10.0"
[vllm]
no_engine = "no CPU wheel"
[vllm.failures]
V1 = [["test_token_exact-vllm-gloo-0000000000"], []]
[[vllm.causes]]
id = "V99"
title = "a cause of {NEXT_VERSION}'s own"
where = "vllm/model_executor/layers/logits_processor.py"
severity = "shipped"
reaches = "every draft"
evidence = ["logits_processor.py:1: pass"]
why = "a mechanism"
failures = ["test_token_exact-vllm-gloo-1111111111"]
script = "docs/conformance/vllm-{NEXT_VERSION}/V99-own.py"
[[vllm.scripts]]
cause = "V99"
stem = "V99-own"
kind = "muse_spark"
case = {{batch = 1, hidden = 3, vocab = 2, tp = 2}}
constants = "MULTIPLIER, CAP = 0.5, 15.0"
note = "a case built from its seed"
"""


@pytest.fixture
def next_release(tmp_path, monkeypatch):
    """The release after the latest listed, beside the releases under test, by its file alone (no module)."""
    folder = tmp_path / "releases"
    folder.mkdir()
    for path in versions.RELEASES.glob("*.toml"):
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / f"{NEXT_VERSION}.toml").write_text(NEXT, encoding="utf-8")
    monkeypatch.setattr(versions, "RELEASES", folder)
    monkeypatch.setattr(releases, "HERE", folder)
    for cached in (releases.data, releases.findings):
        cached.cache_clear()
    yield tmp_path
    for cached in (releases.data, releases.findings):
        cached.cache_clear()


def test_the_next_release_is_a_file_that_the_report_the_install_table_and_the_scripts_take(next_release, monkeypatch):
    from tpargmax.install import vllm as install
    from tpargmax.report import findings as findings_page
    from tpargmax.report import scripts

    assert versions.vllm_releases() == (*versions.vllm_releases()[:-1], NEXT_VERSION)
    monkeypatch.setattr(versions, "installed_vllm", lambda: NEXT_VERSION)
    title, spec, repro, packages = report.page_spec("vllm")  # the report: its page, findings and repro folder
    name = NEXT_VERSION.replace(".", "_")
    assert (title, spec, repro) == (
        f"vLLM {NEXT_VERSION} conformance",
        f"engines.vllm.releases:vllm_{name}",
        f"repro/vllm-{NEXT_VERSION}",
    )
    found = findings_page.load({"findings": spec})
    latest = releases.findings(LATEST, "vllm")
    assert found.page == f"docs/conformance/vllm-{NEXT_VERSION}" and release_changes.previous_of(found) is latest
    assert [c.id for c in found.causes] == ["V1", "V99"] and found.claims()[
        "test_token_exact-vllm-gloo-0000000000"
    ].id == "V1"
    assert {e.cause: e.why for e in found.end_to_end} == {"V1": "no CPU wheel", "V99": "no CPU wheel"}
    assert install.release_for(NEXT_VERSION) == install.Release(("torch", "flashinfer-python"), "3.10.0")
    assert install.release_for(f"{LATEST[:-1]}5") == install.releases()[LATEST]
    # the scripts' generator: the new cause's script from the release's own file, in its page's folder
    own = next(s for s in scripts.scripts() if s.cause == "V99")
    assert own.release == NEXT_VERSION and own.case["vocab"] == 2
    text = scripts.render(own, root=next_release)
    assert f"a cause of {NEXT_VERSION}'s own" in text and "built from its seed" in text
    assert scripts.path_of(own, next_release) == next_release / f"docs/conformance/vllm-{NEXT_VERSION}/V99-own.py"
    for text in (NEXT[: NEXT.index("[[vllm.scripts]]")], NEXT + "k2 = 1\n"):  # without its script; a key too many
        (next_release / "releases" / f"{NEXT_VERSION}.toml").write_text(text, encoding="utf-8")
        releases.data.cache_clear(), releases.findings.cache_clear()
        with pytest.raises(ValueError, match=r"no script for \['V99'\]|\[\[vllm.scripts\]\] #1: .*'k2'"):
            scripts.scripts()
    (next_release / "releases" / f"{NEXT_VERSION}.toml").write_text(NEXT.replace("title =", "titel ="), "utf-8")
    releases.data.cache_clear(), releases.findings.cache_clear()
    with pytest.raises(ValueError, match=rf"releases/{NEXT_VERSION}.toml, \[vllm\]: TypeError: .*'titel'"):
        releases.findings(NEXT_VERSION, "vllm")


# --- what became of the previous release's causes -----------------------------------------------------------------

SOURCE = """\
def f(x):
    y = x + 1
    return torch.stack(
        [y.float(), x.float()], dim=-1
    )
"""


@pytest.mark.parametrize(
    "quote, line",
    [
        ("pkg/mod.py:2: y = x + 1", 2),  # where it was
        ("pkg/mod.py:9: y = x + 1", 2),  # moved
        ("pkg/mod.py:3-5: return torch.stack([y.float(), x.float()], dim=-1)", 3),  # over line breaks
        ("pkg/mod.py:2-3: gone = 1, then return torch.stack(", 2),  # a range and a part: within it
        ("pkg/mod.py:2: y = x + 2", None),  # not there
        ("pkg/other.py:2: y = x + 1", None),  # no such file
    ],
)
def test_a_quote_is_found_again_where_it_now_is(tmp_path, quote, line):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(SOURCE)
    assert release_changes.relocate(quote, tmp_path) == {"quote": quote, "line": line}


def test_a_script_is_run_with_this_interpreter_for_its_exit_and_last_line(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import sys\nprint('V0: expected 1')\nprint('actual 2')\nsys.exit(1)\n")
    assert release_changes.run_script(str(script), tmp_path) == {"exit": 1, "line": "actual 2"}
    assert Path(sys.executable).exists()


QUOTE = "vllm/b.py:1: x = 1"
CAUSE = Cause("V0", "t", "w", "shipped", "r", (QUOTE,), "why", ("F-key",), script="s.py")


@pytest.mark.parametrize(
    "item, change, lacking, failing, status",
    [
        (CAUSE, {"script": {"exit": 1, "line": ""}, "evidence": [{"quote": QUOTE, "line": 3}]}, {}, False, "failing"),
        (CAUSE, {"script": {"exit": 0, "line": ""}, "evidence": [{"quote": QUOTE, "line": None}]}, {}, True, "changed"),
        (CAUSE, {"script": {"exit": 0, "line": ""}}, {}, False, "fixed"),
        (CAUSE, {"script": {"exit": 2, "line": "V0: cannot be judged here: x"}}, {}, False, "unjudged"),
        (Reason("D0", "t", "why", ()), {}, {}, False, "unseen"),
        (Reason("D0", "t", "why", (), needs="cpu_kernels"), {}, {"cpu_kernels": "needs x"}, True, "unjudged"),
    ],
)
def test_each_previous_cause_is_failing_changed_fixed_or_not_judged(item, change, lacking, failing, status):
    """A cause that needs what this build lacks is not judged, whatever the run shows; a reproduction that exits 0
    with no failure of the run is a fix; a failing one whose quoted code is gone has changed."""
    assert release_changes.status(item, change, lacking, failing)[0] == status


def test_the_section_opens_with_every_previous_cause_and_names_what_is_new():
    previous = Findings("E 1.0", "docs/p-1.0", (CAUSE,), (Reason("D0", "by design", "why", ("G-key",)),))
    new = Cause("V9", "new", "w", "shipped", "r", (), "why", ("N-key",), script="n.py")
    findings = Findings("E 2.0", "docs/p-2.0", (CAUSE, new), previous.reasons)
    row = {"name": "subject", "env": {}}
    failures = [("F1", row, "test_x", {"repro_file": "repro/F-key.json"})]
    change = {"evidence": [{"quote": "vllm/b.py:1: x = 1", "line": 7}], "script": {"exit": 1, "line": "actual"}}
    data = {"changes": {"since": "1.0", "release": "2.0", "lacks": {}, "causes": {"V0": change, "D0": {}}}}
    text = "\n".join(release_changes.section(data, failures, findings, previous))
    assert text.startswith("## What changed since vLLM 1.0")
    assert "| [V0](#v0) t | still failing | F1 | exit 1 | `b.py:7` (was 1) |" in text
    assert "| [D0](#d0) by design | not shown: no failure in this run, and no reproduction | — | — | — |" in text
    assert "**New on this page** (not among 1.0's causes): [V9](#v9) new." in text


def test_a_line_another_engine_wrote_is_never_called_gone_from_vllms_wheel():
    """K1 quotes SGLang's merge beside vLLM's top-k: that line is not looked for in vLLM's wheel, nor shown."""
    change = {"evidence": [{"quote": "vllm/a.py:3: x = 1", "line": 3}, {"quote": "sglang/b.py:9: y = 2", "line": None}]}
    assert release_changes.status(CAUSE, change, {}, True)[0] == "failing"
    assert release_changes._evidence(change) == "`a.py:3`"


def test_a_previous_reason_met_only_on_a_corrected_row_is_still_failing():
    """A corrected row's failure is the reason's too (Triton's interpreter raising under a correction): it is seen."""
    reason = Reason("I0", "interpreter", "why", ("C-key",))
    previous = Findings("E 1.0", "docs/p-1.0", (), (reason,))
    failures = [("F2", {"name": "s (corrected)", "corrects": "s", "env": {}}, "test_x", {"repro_file": "r/C-key.json"})]
    data = {"changes": {"since": "1.0", "release": "2.0", "lacks": {}, "causes": {"I0": {}}}}
    text = "\n".join(release_changes.section(data, failures, previous, previous))
    assert "| [I0](#i0) interpreter | still failing | corrected rows: F2 | — | — |" in text


def test_a_release_whose_engine_cannot_run_says_so_where_the_end_to_end_section_would_be():
    from tpargmax.report import e2e as report_e2e

    text = "\n".join(report_e2e.section({}, releases.vllm_0_33_0))
    NO_ENGINE = releases.data("0.33.0")["vllm"]["no_engine"]
    assert (
        text.startswith("## End to end")
        and f"V10, V11, V12, V13, V17, V18, V19, V14**: not run: {NO_ENGINE}" in text
        and "- **V1, V2, V3, V4, V5, V6, V7, V8, V9, V10," in text
    )
    assert report_e2e.section({}, FINDINGS) == []  # 0.32.0's engine runs: a page without its run says nothing


def test_a_later_releases_class_named_here_says_which_release_ships_it(monkeypatch):
    """A repro file of 0.33.0's page replayed where 0.32.0 (or no vLLM) is the release: the name is not offered,
    and the error says where to replay it."""
    monkeypatch.setattr(models, "RELEASE", "0.32.0")
    monkeypatch.setattr(models, "SUBJECTS", {n: s for n, s in models.EVERY.items() if s.shipped_in("0.32.0")})
    with pytest.raises(AttributeError, match=r"MuseSpark1xForCausalLM ships from vLLM 0\.33\.0 on, and vLLM 0\.32\.0"):
        models.__getattr__("MuseSpark1xForCausalLM.get_top_tokens")


def test_a_merge_takes_the_classes_its_run_found_again():
    """A merge that ran discovery (any model row) brings the classes' coverage up to date; one that did not keeps
    the saved report's."""
    base = {"versions": {}, "budget": {}, "command": "a", "rows": [], "classes": [{"name": "old"}], "refusal": {}}
    new = {**base, "command": "b", "classes": [{"name": "new"}], "refusal": {"X": "refused"}}
    assert report.merge(base, new)["classes"] == [{"name": "new"}] and report.merge(base, new)["refusal"]
    assert report.merge(base, {**new, "classes": []})["classes"] == [{"name": "old"}]


def test_a_merge_takes_what_became_of_the_previous_causes_where_its_run_measured_it():
    """A run of no rows (``--rows =none --merge``) measures the previous release's causes again, and the merge keeps
    that; a run of some rows measures nothing, and the saved report's stays."""
    base = {"versions": {}, "budget": {}, "command": "a", "rows": [], "changes": {"causes": {"V1": {}}}}
    measured = {"since": "0.32.0", "causes": {"V1": {}, "V17": {"script": {"exit": 1}}}}
    assert report.merge(base, {**base, "command": "b", "changes": measured})["changes"] == measured
    without = {k: v for k, v in base.items() if k != "changes"}
    assert report.merge(base, {**without, "command": "b"})["changes"] == base["changes"]


def test_a_pages_release_is_its_findings_last_word_or_the_default():
    """What changed is measured since the release of the previous findings: a vLLM page names it; the samplers' page
    with the default release names none."""
    from engines import sampling_page
    from tpargmax.report.changes import previous_of, release_of

    assert release_of(releases.vllm_0_33_0) == release_of(releases.sampling_0_33_0) == "0.33.0"
    assert release_of(sampling_page.FINDINGS) == versions.VLLM_VERSION
    assert previous_of(releases.sampling_0_33_0) is sampling_page.FINDINGS


def test_a_build_s_page_says_what_became_of_each_cause_and_what_is_new(tmp_path):
    """The page of a build no page lists, from its JSON alone: each of 0.33.0's causes met, fixed (its reproduction
    exits 0, no failure is its) or still failing; a cell that failed only for known causes reads known; what no
    cause claims is new."""
    from tpargmax.report.page import render
    from tpargmax.report.saved import read_report

    known = {"cause": "modelled: V1+V4", "rule": "chose a non-maximal logit", "count": 3, "replay": "python -m ..."}
    new = {"rule": "tie across ranks resolved to the higher rank", "case": "Case(batch=1, hidden=2, vocab=4, tp=2)"}
    cell = {"outcome": "passed", "failures": [], "skip_reason": None, "known": [known]}
    data = {
        "title": "vLLM 0.34.0.dev1 conformance",
        "command": "tpargmax report --rows =vllm",
        "findings": findings_spec("0.33.0"),
        "versions": {"python": "3.11"},
        "budget": {"examples": 120, "backend": "gloo", "tps": [2, 4], "profile": "ci", "gloo_share": 0.0625},
        "rows": [
            {
                "name": "vllm",
                "kind": "vLLM layer",
                "note": "",
                "option": ["--impl", "vllm"],
                "cells": {
                    "test_tp_invariance": cell,
                    "test_token_exact": {"outcome": "failed", "failures": [new], "skip_reason": None},
                },
            }
        ],
        "baseline": {"since": "0.33.0", "release": "0.34.0.dev1"},
        "changes": {
            "since": "0.33.0",
            "release": "0.34.0.dev1",
            "lacks": {},
            "causes": {"V3": {"script": {"exit": 0, "line": "actual: [0]"}}, "V2": {"script": {"exit": 1, "line": ""}}},
        },
    }
    (tmp_path / "r.json").write_text(json.dumps(data))
    page = render(read_report(tmp_path / "r.json"))
    assert "## What changed since vLLM 0.33.0" in page and "## Root causes" not in page
    line = {row.split(" ", 2)[1]: row for row in page.splitlines() if row.startswith("| V")}
    assert "| fixed (its reproduction exits 0" in line["V3"]
    assert "| still failing |" in line["V1"] and "`vllm` test_tp_invariance x3" in line["V1"] and "x3" in line["V4"]
    assert "| still failing |" in line["V2"] and "| exit 1 |" in line["V2"]
    assert "| `vllm` | vLLM layer | **F1** | known |" in page
    assert "**New in 0.34.0.dev1:** F1: no known cause claims them." in page
    assert "- **New:** no known cause of vLLM 0.33.0 claims it" in page
