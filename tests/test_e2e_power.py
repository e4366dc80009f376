"""The end-to-end properties fail, for their own rule, on vLLM's engine with a broken local path in every worker.

Collected only with ``--e2e`` (``tpargmax e2e --self-test``), in vLLM's environment.  Each case plants one bug of
``tests/broken_engine.py`` into every worker of the engines a property uses, runs the property exactly as the suite
does (the same test function, strategy, pinned examples and ``ci`` budget, without shrinking) and takes the bug back
out.  Where the bug makes vLLM's engine die (a padding id indexes ``d2t``), the failure still names the rule, from
what the heads returned first.  The lossless property must still hold on the bugs that leave the engine up: a wrong
draft token is only rejected, which is why the others exist.
The causes' engine scripts (``EndToEnd.script``) fail on vLLM and pass once the corrections are in every process.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from engines.vllm.causes.findings import FINDINGS
from engines.vllm.e2e.engine import EngineSpec
from engines.vllm.e2e.pool import EnginePool, group_of
from engines.vllm.e2e.scenario import HETERO
from properties import test_e2e as e2e
from properties.argmax.faults import VALUES_NARROWED
from properties.e2e.own_words import CONSTRAINT_SKIPPED, MAPPING_SKIPPED
from properties.failures import PropertyFailure
from properties.harness import settings as run_settings
from properties.harness.profiles import backend_budget, running_with
from tests.suite import FIND_ONLY, ROOT
from tests.test_e2e_pieces import run_engine_script

DTYPE, METHOD = "float32", "eagle3"
ON = {tp: EngineSpec(DTYPE, METHOD, tp, True) for tp in (1, 2)}
GROUP = (DTYPE, METHOD)
OFFSET = "[global id without its rank's offset: draft id "
DIFFER = "[draft tokens differ between engines]"
REJECTED = "[a draft token that predicts the target exactly was rejected]"
PADDING = "[padding returned: "
NARROWED = f"[{VALUES_NARROWED}: rounded to bfloat16"
DIED = "the engine then died: IndexError: index "  # vLLM indexes d2t with the padding id
# (planted bug, property, its engine or group, the words its failure must start with)
CATCHES = [
    ("ids_without_rank_offset", e2e.test_draft_tokens, {"engine_spec": ON[2]}, OFFSET),
    ("ids_without_rank_offset", e2e.test_same_drafts, {"e2e_group": GROUP}, DIFFER),
    ("ids_without_rank_offset", e2e.test_exact_acceptance, {"engine_spec": ON[2]}, REJECTED),
    ("ties_to_highest_rank", e2e.test_draft_tokens, {"engine_spec": ON[2]}, "[tie across ranks resolved to the higher"),
    ("ties_to_highest_rank", e2e.test_same_drafts, {"e2e_group": GROUP}, DIFFER),
    ("d2t_applied_twice", e2e.test_draft_tokens, {"engine_spec": ON[1]}, "[d2t applied twice: draft id "),
    ("d2t_applied_twice", e2e.test_draft_tokens, {"engine_spec": ON[2]}, "[d2t applied twice: draft id "),
    ("d2t_applied_twice", e2e.test_same_drafts, {"e2e_group": GROUP}, DIFFER),
    ("d2t_applied_twice", e2e.test_exact_acceptance, {"engine_spec": ON[1]}, REJECTED),
    *(
        (plant, e2e.test_draft_tokens, {"engine_spec": EngineSpec(dtype, method, tp, True)}, PADDING)
        for plant in ("padding_unmasked", "padding_masked_with_nan")
        for method in ("eagle3", "eagle")
        for dtype in ("float32", "bfloat16")
        for tp in (2, 1)
    ),
    *(
        ("ids_in_logits_dtype", e2e.test_draft_tokens, {"engine_spec": EngineSpec("bfloat16", m, 2, True)}, "[")
        for m in ("eagle3", "eagle")
    ),
]
CATCHES += [  # near ties across ranks in float32 (near_ties_across_ranks): a 16-bit exchange of the values ties them
    ("values_in_bfloat16", e2e.test_draft_tokens, {"engine_spec": EngineSpec(DTYPE, m, 2, True)}, NARROWED)
    for m in ("eagle3", "eagle")
]
CATCHES += [  # a model's own local path (after d2t) returning an id vLLM cannot hold: named, though vLLM dies of it
    ("id_past_every_vocabulary", e2e.test_draft_tokens, {"engine_spec": ON[tp]}, "[returned id out of range")
    for tp in (1, 2)
]
OWN_WORDS = {tp: EngineSpec(DTYPE, HETERO, tp, True) for tp in (1, 2)}  # a draft with a vocabulary of its own
CATCHES += [
    ("own_words_unconstrained", e2e.test_draft_tokens, {"engine_spec": OWN_WORDS[tp]}, f"[{CONSTRAINT_SKIPPED}: ")
    for tp in (1, 2)
]
CARRIED = "carried in bfloat16"  # as the first line says it, alone or beside an off-by-one it also fits
ENGINE_SCRIPTS = [reach for reach in FINDINGS.end_to_end if reach.script]
UNSEEN = [(plant, ON[2]) for plant in ("ids_without_rank_offset", "ties_to_highest_rank", "d2t_applied_twice")]


def group(given: dict[str, object]) -> tuple[str, str]:
    spec = given.get("engine_spec")
    return (spec.dtype, spec.method) if isinstance(spec, EngineSpec) else given["e2e_group"]


@contextmanager
def planted(pool: EnginePool, plant: str, group: tuple[str, str]) -> Iterator[None]:
    """``plant`` in every worker of the group's engines (and of any started again), and out again after; taking it
    back never hides the failure that ended the run."""
    for spec in group_of(*group):
        pool.get(spec, group_of(*group))
    pool.plant(plant)
    try:
        yield
    finally:
        pool.plant(None)


def failure(prop, pool: EnginePool, plant: str, **given: object) -> str:
    """Run ``prop`` as the suite would, with ``plant`` in the workers; the message it failed with, or ''."""
    with planted(pool, plant, group(given)), running_with(prop, FIND_ONLY), backend_budget(prop, None):
        try:
            prop(engine_pool=pool, **given)
        except PropertyFailure as exc:
            return str(exc)
    return ""


def _id(given: dict[str, object]) -> str:
    spec = given.get("engine_spec")
    return spec.name if isinstance(spec, EngineSpec) else "-".join(reversed(given["e2e_group"]))


@pytest.mark.parametrize(
    "plant, prop, given, words", CATCHES, ids=[f"{p}-{f.__name__}-{_id(g)}" for p, f, g, _ in CATCHES]
)
def test_an_end_to_end_property_fails_on_a_broken_local_path(engine_pool, plant, prop, given, words):
    if group(given) not in run_settings.current().e2e_groups:
        pytest.skip(f"the {'-'.join(reversed(group(given)))} engines are not in this run (--e2e-methods, --e2e-dtypes)")
    message = failure(prop, engine_pool, plant, **given)
    assert message, f"{prop.__name__} passed with {plant} planted: the property lost its power"
    assert message.startswith(words), f"{prop.__name__} caught {plant}, but not for {words!r}:\n{message}"
    assert f"planted in every worker: {plant}" in message
    if plant == "ids_in_logits_dtype":
        assert CARRIED in message.splitlines()[0], message
    if plant.startswith("padding") and given["engine_spec"].method == "eagle3":  # d2t indexed with it: vLLM died
        assert DIED in message, message


@pytest.mark.parametrize("plant, spec", UNSEEN, ids=[p for p, _ in UNSEEN])
def test_the_output_alone_never_shows_a_broken_local_path(engine_pool, plant, spec):
    """Lossless holds with every planted bug: a wrong draft token is rejected, and the tokens stay the target's."""
    assert failure(e2e.test_lossless, engine_pool, plant, engine_spec=spec) == ""


@pytest.mark.parametrize("tp", [1, 2])
def test_vllm_sends_a_draft_with_its_own_words_unmapped_and_the_correction_does_not(engine_pool, tp):
    """With the switch on, vLLM 0.32.0's proposer returns the draft's own ids (no constraint, no mapping): the
    draft-token property names it; the project's correction (``engines.vllm.corrections.proposers``), planted in
    every worker, passes it and the exact draft's acceptance."""
    spec = OWN_WORDS[tp]
    if (DTYPE, HETERO) not in run_settings.current().e2e_groups:
        pytest.skip(f"the {HETERO}-{DTYPE} engines are not in this run (--e2e-methods, --e2e-dtypes)")
    from engines.vllm.corrections.proposers import PATCHES

    if not PATCHES:
        pytest.skip("this vLLM has no V1 proposer with use_heterogeneous_vocab")
    with running_with(e2e.test_draft_tokens, FIND_ONLY), backend_budget(e2e.test_draft_tokens, None):
        try:
            e2e.test_draft_tokens(engine_pool=engine_pool, engine_spec=spec)
        except PropertyFailure as exc:
            assert str(exc).startswith(f"[{MAPPING_SKIPPED}: returned draft id "), str(exc)
        else:
            raise AssertionError("vLLM's own switch passed the draft-token property with a vocabulary of its own")
    for prop in (e2e.test_draft_tokens, e2e.test_exact_acceptance):
        assert failure(prop, engine_pool, "own_words_corrected", engine_spec=spec) == "", prop.__name__


@pytest.mark.parametrize("reach", ENGINE_SCRIPTS, ids=[r.cause for r in ENGINE_SCRIPTS])
def test_an_engine_script_fails_while_its_cause_is_there_and_passes_corrected(reach):
    """Run as a user runs it, the script exits 1 and says why; with the project's corrections in every process of
    the engine (``tests/fixtures/corrected_site``), 0."""
    done = run_engine_script(reach)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert done.stdout.splitlines()[0].startswith(f"{reach.cause} end to end: "), done.stdout
    site = ROOT / "tests" / "fixtures" / "corrected_site"
    done = run_engine_script(reach, PYTHONPATH=str(site), TPARGMAX_ROOT=str(ROOT))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
