"""SGLang's published page, what needs the engine: its standalone reproduction of the greedy paths' causes (torch
and the wheel alone) and its repro files' replays.  What needs no engine (the page renders from its JSON, a row for
every subject, a repro file for every failure) is :mod:`tests.test_published_pages`'.

The scripts' verdicts and the replays need the wheel (``tpargmax install-sglang``) and skip without it, with the
install command as the reason.
"""

from __future__ import annotations

import pytest

from engines.sglang.causes import findings as sglang_findings
from engines.sglang.subjects import dflash_draft
from tests.published import Published, assert_still_failing
from tests.suite import ROOT, run_script

FAILURES = Published(sglang_findings.PAGE).failures
GREEDY = ROOT / sglang_findings.PAGE / "greedy_paths.py"  # torch and the wheel alone
MISSING = dflash_draft.why_unavailable()


def test_without_the_wheel_the_greedy_script_says_so_in_one_line_and_exits_2():
    fixture = ROOT / "tests" / "fixtures" / "without_engines"
    out = run_script(GREEDY, PYTHONPATH=str(fixture), WITHOUT="sglang")
    lines = out.stdout.splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr[-2000:]
    assert lines[0].startswith("greedy_paths: cannot be judged here: ") and lines[0].endswith("not installed"), lines


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_the_greedy_script_still_shows_its_causes():
    out = run_script(GREEDY)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("IndexError: max(): Expected reduction dim 1 to have non-zero size.") == 2, out.stdout
    assert "[128, 128] on ranks 0, 1 (torch.argmax: 70)" in out.stdout, out.stdout
    assert "[64, 64] on ranks 0, 1 (torch.argmax: 0)" in out.stdout, out.stdout
    assert "256 ids in shards of 128: [255, 255]" in out.stdout, out.stdout  # no padding: the gather fits
    assert "250 ids in shards of 128: ['RuntimeError: output tensor size must be equal" in out.stdout, out.stdout
    assert "copies 4 ulps apart: [1, 5] on ranks 0, 1" in out.stdout, out.stdout
    assert "shards of 4 base ids: ['RuntimeError: selected index k out of range'" in out.stdout, out.stdout


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_the_greedy_paths_failures_still_fail_on_replay_with_the_rule_they_recorded():
    """Every failure of a row that torch alone runs (the kernels' rows need Triton: `TRITON_INTERPRET=1 tpargmax
    repro FILE` on a CPU)."""
    assert_still_failing([(row, fail) for row, fail in FAILURES if not row.get("env")])
