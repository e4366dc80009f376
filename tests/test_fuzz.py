"""A planted bug under ``tpargmax fuzz``: non-zero exit, repro files that replay anywhere, a database replayed first.

The fuzz session is budgeted in rounds and examples with a pinned seed, never in
minutes, so what it finds does not depend on the machine's speed.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.suite import clear_settings, fork_the_commands, run_suite
from tpargmax.cli import main as tpargmax

PLANTED = "tests.broken:highest_rank_wins"


def test_fuzz_finds_a_planted_bug_and_everything_it_leaves_replays(tmp_path, capsys, monkeypatch):
    clear_settings(monkeypatch)
    fork_the_commands(monkeypatch)
    monkeypatch.setenv("TPARGMAX_DB", str(tmp_path / "db"))
    repro_dir, log = tmp_path / "repro", tmp_path / "fuzz-log.jsonl"
    args = ["--rounds", "1", "--examples", "20", "--seed", "8", "-k", "token_exact or tp_invariance"]
    args += ["--impl", PLANTED, "--backend", "sim", "--repro-dir", str(repro_dir), "--log", str(log), "-n", "0"]
    code = tpargmax(["fuzz", *args])
    out = capsys.readouterr().out
    assert code == 1, out[-3000:]
    # token_exact fails on a pinned edge case; tp_invariance is found by generation, so it lands in the database
    for test in ("test_token_exact", "test_tp_invariance"):
        assert f"FAILED properties/test_equivalence.py::{test}[{PLANTED}-sim]" in out, out[-3000:]
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["round"] == 1 and entry["seed"] == int(out.split("seed ", 1)[1].split(",")[0])

    files = sorted(repro_dir.glob("test_token_exact-*.json"))
    assert files, sorted(p.name for p in repro_dir.iterdir())
    for backend in ("sim", "gloo"):
        assert tpargmax(["repro", str(files[0]), "--backend", backend]) == 1
        still = capsys.readouterr().out
        assert "STILL FAILING: [tie across ranks" in still and "rank 0 won" in still and "oracle token" in still, still
        assert tpargmax(["repro", str(files[0]), "--backend", backend, "--impl", "vllm_pairs"]) == 0
        fixed = capsys.readouterr().out
        assert "fixed: the property holds" in fixed, fixed

    # the next plain run (dev profile, same database) replays the find before generating anything new
    plain = run_suite(
        "properties/test_equivalence.py",
        "-k",
        "tp_invariance",
        "--backend",
        "sim",
        "--impl",
        PLANTED,
        "--hypothesis-show-statistics",
        profile="dev",  # the database is on, as in every plain run outside CI
        TPARGMAX_DB=str(tmp_path / "db"),
    )
    assert plain.returncode == 1
    assert "during reuse phase" in plain.stdout, plain.stdout[-3000:]
    reuse = plain.stdout.split("during reuse phase")[1].split("\n\n")[0]
    assert re.search(r"\b[1-9]\d* failing", reuse), reuse  # the saved finds, however many the shrinker kept


@pytest.mark.parametrize(
    "args, words",
    [
        ([], "give a budget: --minutes, --rounds or both"),
        (["--rounds", "0"], "--rounds must be > 0"),
        (["--minutes", "1", "--examples", "-5"], "--examples must be > 0"),
    ],
)
def test_fuzz_needs_a_positive_budget(args, words, capsys):
    with pytest.raises(SystemExit) as info:
        tpargmax(["fuzz", *args])
    assert info.value.code == 2 and words in capsys.readouterr().err
