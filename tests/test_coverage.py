"""The coverage of feature pairs: what a case's features are, which pairs count, and the command end to end."""

from __future__ import annotations

import json

from properties.cases.case import Case
from properties.cases.tensors import build
from properties.harness.coverage import IMPOSSIBLE, count_pairs, features, valid_pairs
from properties.oracle import answer
from properties.strategies import EDGE_CASES
from tests.suite import clear_settings, fork_the_commands
from tpargmax.cli import main as tpargmax


def features_of(case: Case) -> list[str]:
    inputs = build(case)
    return features(inputs, answer(inputs).draft_logits)


def test_an_added_maximum_with_a_copied_trap_and_eagle3():
    case = Case(batch=4, hidden=5, vocab=500, tp=3, added=100, padding_size=96, ties=("added_max",), d2t="eagle3")
    found = features_of(case)
    for feature in ("added ids: tokens", "ids >= L: none", "padding size: 96", "d2t: eagle3", "tie: added_max"):
        assert feature in found, found
    assert "winner: added" in found and "padding: zero" in found


def test_a_trap_above_the_maximum_is_a_padding_trap_winner():
    found = features_of(Case(batch=4, hidden=4, vocab=7, tp=8, padding="above_max"))
    assert "winner: padding trap" in found and "padding: above_max" in found and "added ids: none" in found
    assert "winner: padding trap" not in features_of(Case(batch=4, hidden=4, vocab=7, tp=8, padding="zero", seed=1))


def test_valid_pairs_leave_out_one_dimensions_values_and_the_impossible_ones():
    pairs = valid_pairs()
    assert frozenset(("dtype: float32", "dtype: bfloat16")) not in pairs  # a case has one dtype
    assert frozenset(("tie: added_tie", "tie: added_max")) in pairs  # plans combine
    assert frozenset(("winner: base", "winner: added")) in pairs  # rows differ
    assert frozenset(("d2t: eagle3", "winner: added")) in pairs
    assert not set(IMPOSSIBLE) & set(pairs)
    assert len(pairs) == len(set(pairs))


def test_pairs_are_counted_once_per_example():
    singles, pairs = count_pairs([["a: 1", "b: 2", "b: 2"], ["a: 1", "c: 3"]])
    assert singles == {"a: 1": 2, "b: 2": 1, "c: 3": 1}
    assert pairs == {frozenset(("a: 1", "b: 2")): 1, frozenset(("a: 1", "c: 3")): 1}


def test_the_command_records_every_example_and_names_the_thin_pairs(tmp_path, capsys, monkeypatch):
    """One property, one implementation, on the simulated group: every drawn and pinned example, recorded."""
    clear_settings(monkeypatch)
    fork_the_commands(monkeypatch)
    recorded = 60 + len(EDGE_CASES)
    out = tmp_path / "coverage.json"
    args = ["coverage", "-k", "test_token_exact", "--backend", "sim", "--impl", "vllm_pairs", "--max-examples", "60"]
    code = tpargmax([*args, "-n", "0", "--min", "40", "--json", str(out)])
    printed = capsys.readouterr()
    assert f"{recorded} examples recorded (pytest green)" in printed.out, printed.out + printed.err
    saved = json.loads(out.read_text())
    thin = [name for name, count in saved["pairs"].items() if count < 40]
    assert code == (1 if thin else 0)
    assert f"pairs below 40 examples: {len(thin)}" in printed.out
    assert sum(saved["features"][f"d2t: {plan}"] for plan in ("none", "zeros", "eagle3")) == recorded
