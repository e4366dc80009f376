"""Hostile sampling input: a pasted SamplePlan string and a repro file's sampling fields are data, never code;
whatever cannot be used is one line and exit 2 (the rest of tests/test_hostile_input.py, for samplers)."""

from __future__ import annotations

import pytest

from properties.replay import main as replay_main
from properties.sampling.checks import SAMPLE_EXACT
from tests import test_hostile_input as hostile
from tests.test_hostile_input import edit, field, one_line
from tpargmax.cli import main as tpargmax

good, marker = hostile.good, hostile.marker  # the same fixtures: a good file, and a marker that must never appear

DAMAGED = {  # how a good file's sampling fields are damaged -> (the damage, words its one line must hold)
    "a sampling plan with code": (
        lambda p, m: edit(p, field("extra", {"sampling": {"temperature": f"__import__('os').system('touch {m}')"}})),
        "extra 'sampling': SamplePlan field 'temperature' must be one of",
    ),
    "a sampling plan that is a list": (
        lambda p, m: edit(p, field("extra", {"sampling": [1]})),
        "extra 'sampling': sampling plan must be a mapping",
    ),
    "a sampling plan with a huge C": (
        lambda p, m: edit(p, field("extra", {"sampling": {"candidates": 10**9}})),
        "SamplePlan field 'candidates' must be an int in [1, 4096]",
    ),
    "an unknown distribution case": (
        lambda p, m: edit(p, field("extra", {"distribution": ["tp2"]})),
        "extra 'distribution' must be one of",
    ),
    "a sampling property without its plan": (
        lambda p, m: edit(p, field("property", SAMPLE_EXACT)),
        "its property replays with extra 'sampling', which is missing",
    ),
}


@pytest.mark.parametrize("how", sorted(DAMAGED))
def test_a_damaged_sampling_record_is_exit_2_with_one_line(how, good, marker, capsys):
    damage, words = DAMAGED[how]
    path = damage(good, marker)
    assert tpargmax(["repro", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"tpargmax repro: {path}: "), captured
    assert words in one_line(captured.err), captured.err


@pytest.mark.parametrize(
    "plan, words",
    [
        ("SamplePlan(temperature=__import__('os').system('touch {m}'))", "must be a literal"),
        ("SamplePlan(top_k='evil')", "SamplePlan field 'top_k' must be one of"),
        ("Case(batch=1)", "expected SamplePlan(name=value, ...)"),
        ("SamplePlan(seed=-1)", "SamplePlan field 'seed' must be an int"),
    ],
)
def test_a_sampling_plan_string_is_data_or_one_line(plan, words, marker, capsys):
    case = "Case(batch=1, hidden=3, vocab=7, tp=1)"
    assert replay_main(["--impl", "candidates", "--sampling", plan.format(m=marker), case]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and words in one_line(captured.err), captured
