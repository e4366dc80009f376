"""Model Runner V2's speculators, found in a wheel by reading it: which reach the switch, through which of their
own calls, and where each method they run comes from; and, with vLLM installed, the installed wheel's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engines.vllm.subjects.layer import INSTALL_HINT
from engines.vllm.wheel import speculators

BASE = """
class BaseSpeculator:
    def propose(self): ...

class DraftModelSpeculator(BaseSpeculator):
    def sample_draft(self, h, spec_step_idx=0):
        if self.use_local_argmax_reduction:
            return self.get_draft_top_tokens(h, spec_step_idx)
        return self.compute_draft_logits(h, spec_step_idx).argmax(-1)
    def get_draft_top_tokens(self, h, spec_step_idx):
        return self.model.get_top_tokens(h)
    def compute_draft_logits(self, h, spec_step_idx):
        return self.model.compute_logits(h)
    def _validate_local_argmax_reduction(self): ...
    def load_model(self, target):
        self._validate_local_argmax_reduction()
"""
AUTOREGRESSIVE = """
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

class Steps(DraftModelSpeculator):
    def propose(self):
        return self._decode()
    def _decode(self):
        return self.sample_draft(None)

class MultiStep(Steps):
    def get_draft_top_tokens(self, h, spec_step_idx):
        return self.model.get_top_tokens(h, spec_step_idx=spec_step_idx)
    def load_model(self, target):
        super().load_model(target)
"""
OWN_PICK = """
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator, BaseSpeculator

class Walk(DraftModelSpeculator):
    def load_model(self, target):
        self.model = target  # its own load, without the base's checks
    def propose(self):
        return self._walk()
    def _walk(self):
        return self.model.compute_candidates().argmax(-1)

class Ngram(BaseSpeculator):
    def propose(self):
        return []
"""


@pytest.fixture
def wheel(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "vllm" / speculators.FOLDER
    for name, text in {"speculator.py": BASE, "ar/speculator.py": AUTOREGRESSIVE, "walk.py": OWN_PICK}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(speculators, "vllm_root", lambda: tmp_path / "vllm")
    speculators.scan.cache_clear()
    yield tmp_path
    speculators.scan.cache_clear()


def test_speculators_are_found_with_where_their_methods_come_from_and_whether_they_reach_the_switch(wheel):
    found = {s.name: s for s in speculators.scan()}
    assert set(found) == {"DraftModelSpeculator", "Steps", "MultiStep", "Walk", "Ngram"}  # not the root class
    assert found["MultiStep"].module == "vllm.v1.worker.gpu.spec_decode.ar.speculator"
    assert found["MultiStep"].owner("get_draft_top_tokens") == "MultiStep"
    assert found["MultiStep"].owner("sample_draft") == found["Steps"].owner("sample_draft") == "DraftModelSpeculator"
    assert found["MultiStep"].picks == ("propose", "_decode", "sample_draft") and found["MultiStep"].reaches_the_switch
    assert found["Walk"].drafts_with_a_head and not found["Walk"].reaches_the_switch  # accepted, never read
    assert not found["Ngram"].drafts_with_a_head and not found["Ngram"].reaches_the_switch
    assert not found["DraftModelSpeculator"].reaches_the_switch  # no propose of its own: a base
    base, ar = "vllm.v1.worker.gpu.spec_decode.speculator:DraftModelSpeculator", found["MultiStep"].module
    assert found["MultiStep"].loads == (f"{ar}:MultiStep", base) and found["Steps"].loads == (base,)
    assert found["Walk"].loads == ("vllm.v1.worker.gpu.spec_decode.walk:Walk",)  # never the base's load


def test_a_stand_in_runs_an_abstract_class_s_own_methods():
    import abc

    class Speculator(abc.ABC):
        @abc.abstractmethod
        def propose(self): ...

        def pick(self):
            return "its own"

    made = speculators.stand_in(Speculator)
    assert isinstance(made, Speculator) and made.pick() == "its own"


# --- with vLLM installed: the installed wheel's speculators, on a gloo group --------------------------------------

MULTI = "vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator:MultiModuleMTPSpeculator"


def _drops_the_step(self, hidden_states, spec_step_idx):
    """A multi-module speculator's local path that forgets the step: the base class's body."""
    return self.model.get_top_tokens(hidden_states)


def __getattr__(name: str):
    """``drops_the_step``: the multi-module speculator's local draft with its step index dropped (needs vLLM)."""
    if name != "drops_the_step":
        raise AttributeError(name)
    from engines.findings import Patch, corrected
    from engines.vllm.subjects import speculators as subjects

    patch = Patch(f"{MULTI}.get_draft_top_tokens", _drops_the_step)
    return corrected(subjects.__getattr__("MultiModuleMTPSpeculator.local_draft"), [patch], "drops_the_step")


def test_a_multi_module_speculator_that_takes_another_steps_head_is_caught():
    """The draft has a head per step where the classic path selects one: the shipped local path (which hands the
    model its step) answers as the oracle does, one that drops the step index takes step 0's head and does not."""
    from groups.pool import RankPool
    from properties.cases.case import Case
    from properties.cases.tensors import build
    from properties.harness.runner import rank_kwargs
    from properties.oracle import answer

    pytest.importorskip("vllm", reason=INSTALL_HINT)
    from engines.vllm.subjects import speculators as subjects

    if "MultiModuleMTPSpeculator" not in subjects._found():
        pytest.skip("this vLLM ships no multi-module MTP speculator")
    assert subjects.selects_by_step("MultiModuleMTPSpeculator")
    inputs = build(Case(batch=4, hidden=3, vocab=200, tp=2, seed=1))
    pool = RankPool(2, backend="gloo", timeout=120, start_timeout=300)
    try:
        tokens = {}
        for spec in (f"{subjects.SPEC}:MultiModuleMTPSpeculator.local_draft", f"{__name__}:drops_the_step"):
            out, _ = pool.run(spec, [rank_kwargs(inputs, r) for r in range(2)])
            tokens[spec] = out[0]
    finally:
        pool.close()
    shipped, dropped = tokens.values()
    assert torch.equal(shipped, answer(inputs).tokens) and not torch.equal(dropped, answer(inputs).tokens)


def test_the_switch_changes_a_nan_rows_draft_token_and_the_correction_agrees():
    """V16 (vLLM 0.34.0 on): on a row whose logits hold a NaN, the speculator's local path takes the NaN's id, as the
    classic path of the contract does; its classic path (``greedy_argmax``) takes the largest number's; the corrected
    classic path takes the NaN's id again."""
    from groups.pool import RankPool
    from properties.cases.case import Case
    from properties.cases.tensors import build
    from properties.harness.runner import rank_kwargs
    from properties.oracle import answer

    pytest.importorskip("vllm", reason=INSTALL_HINT)
    from engines.vllm.corrections.speculators import PATCHES
    from engines.vllm.subjects import speculators as subjects

    if not PATCHES:
        pytest.skip("this vLLM's speculators pick with torch.argmax: no greedy_argmax to judge")
    inputs = build(Case(batch=2, hidden=3, vocab=8, tp=2, bias=True, specials=("nan_one_rank",)))
    want = answer(inputs).tokens
    pool = RankPool(2, backend="gloo", timeout=120, start_timeout=300)
    specs = (
        f"{subjects.SPEC}:EagleSpeculator.local_draft",
        f"{subjects.SPEC}:EagleSpeculator.classic_draft",
        "engines.vllm.corrected:EagleSpeculator.classic_draft",
    )
    try:
        got = [pool.run(spec, [rank_kwargs(inputs, r) for r in range(2)])[0][0] for spec in specs]
    finally:
        pool.close()
    local, classic, corrected = got
    assert torch.equal(local, want) and torch.equal(corrected, want) and not torch.equal(classic, want)
