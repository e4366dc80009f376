"""A user's implementation plugs in with --impl, as README shows: correct passes, wrong fails clearly."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import settings

from properties import test_equivalence as eq
from properties import test_layouts as lay
from properties.argmax.faults import ADDED_MASKED
from properties.replay import main as replay_main
from tests.suite import FIND_ONLY, failure, run_suite


def test_readme_example_implementation_passes():
    # every property on both backends: the pinned edge cases, and a few generated examples each; the README's
    # example numbers its rows from ``start``, so it takes heads whose tokens are base ids (--heads base), and it
    # takes no dp_rows, so attention data parallel's property skips it, saying why (the other layouts run it with
    # no option of their own)
    readme = "examples.float64_pairs:local_argmax"
    args = ["--impl", readme, "--heads", "base", "--max-examples", "8", "-rs"]
    out = run_suite(*args, "properties", "-k", "not top_k and not test_sampling")  # top-k and samplers do not call it
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
    skipped = [line for line in out.stdout.splitlines() if "takes no dp_rows keyword" in line]
    reason = f"{readme} takes no dp_rows keyword: attention data parallel hands each rank its own rows"
    assert len(skipped) == 1 and skipped[0].startswith("SKIPPED [2] ") and reason in skipped[0], out.stdout[-3000:]


@pytest.mark.parametrize("prop", [lay.test_attention_dp_rows, lay.test_exact_under_divergence, lay.test_uneven_shards])
def test_the_attention_dp_example_passes_every_layout(prop):
    """docs/contract.md's attention data parallel example, written against the contract alone: its own rows on every
    rank, and the other layouts too (the pinned cases and a few drawn ones each; the suite's run draws the rest)."""
    assert failure(prop, "examples.attention_dp:local_argmax", settings(FIND_ONLY, max_examples=160)) == ""


def test_readme_example_fails_on_added_tokens_for_the_rule_it_breaks():
    """Without --heads base, added ids are tokens, and the example masks them: the suite says so."""
    message = failure(eq.test_token_exact, "examples.float64_pairs:local_argmax")
    assert message.startswith(f"[{ADDED_MASKED}]"), message
    assert "added=" in message.split("case: ", 1)[1].splitlines()[0], message


def section(stdout: str, test_id: str) -> str:
    """The part of pytest's report about one test (its failure section or its summary line)."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("__") and f" {test_id} " in line]
    if not starts:
        return "\n".join(line for line in lines if test_id in line)
    end = next((i for i in range(starts[0] + 1, len(lines)) if lines[i].startswith(("__", "=="))), len(lines))
    return "\n".join(lines[starts[0] : end])


def test_broken_implementations_fail_clearly_through_the_suite(tmp_path, capsys):
    """Three implementations in one run, as a user lists them: a wrong one, a hanging one and a known failure."""
    xfails = tmp_path / "xfails.txt"
    xfails.write_text("test_token_exact[tests.broken:d2t_skipped  # we map d2t later, outside the reduction\n")
    impls = "tests.broken:highest_rank_wins,tests.broken:last_rank_skips_the_exchange,tests.broken:d2t_skipped"
    args = ["--impl", impls, "--backend", "sim", "properties/test_equivalence.py", "-k", "token_exact", "-rx"]
    out = run_suite(*args, TPARGMAX_XFAILS=str(xfails))
    assert out.returncode == 1 and "2 failed" in out.stdout and "1 xfailed" in out.stdout, out.stdout[-3000:]

    # wrong: the rule, the shrunk case, a replay command that reproduces it, and a repro file
    wrong = section(out.stdout, "test_token_exact[tests.broken:highest_rank_wins-sim]")
    assert "[tie across ranks resolved to the higher rank]" in wrong, wrong
    assert "tpargmax repro file" in wrong and "replay: tpargmax repro " in wrong, wrong
    replay = shlex.split(wrong.rsplit("replay: python -m properties.replay", 1)[1].splitlines()[0])
    assert replay[:2] == ["--impl", "tests.broken:highest_rank_wins"]
    assert replay_main(replay) == 1  # the printed command, run in this process
    again = capsys.readouterr().out
    assert "tie across ranks resolved to the higher rank" in again, again

    # hanging: a rank that skips the exchange is named at once on the simulated group (on gloo the
    # pool's timeout names it: tests/test_pool.py), and the hang is reported, not shrunk
    hung = section(out.stdout, "test_token_exact[tests.broken:last_rank_skips_the_exchange-sim]")
    assert "ImplementationHung: [hang:" in hung and "never joined" in hung, hung

    # known failure: a strict xfail with the reason from the file (TPARGMAX_XFAILS)
    known = section(out.stdout, "test_token_exact[tests.broken:d2t_skipped-sim]")
    assert "XFAIL" in known and "we map d2t later" in known, out.stdout[-3000:]


def test_a_dying_rank_on_gloo_is_named_and_the_pool_rebuilt():
    args = ["--impl", "tests.broken:rank_one_dies", "--backend", "gloo", "--collective-timeout", "5"]
    out = run_suite(*args, "properties/test_equivalence.py", "-k", "token_exact or determinism")
    assert out.returncode == 1, out.stdout[-3000:]
    # both tests fail for the death itself: the second one ran on a freshly started pool
    assert out.stdout.count("rank 1 died (SIGKILL)") >= 2 and "2 failed" in out.stdout, out.stdout[-3000:]
