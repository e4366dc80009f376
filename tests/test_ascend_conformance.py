"""vllm-ascend's published page, what needs the engine's source: its standalone reproduction of the reduce paths'
causes (torch and the source alone) and its repro files' replays.  What needs no engine (the page renders from its
JSON, a row for every subject, a repro file for every failure) is :mod:`tests.test_published_pages`'.

The script's verdict and the replays need the source (``tpargmax install-ascend``) and skip without it, with the
install command as the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.ascend.causes import findings as ascend_findings
from engines.ascend.wheel.source import installed, why_unavailable
from tests.published import Published, assert_still_failing
from tests.suite import ROOT, run_script

SCRIPT = ROOT / ascend_findings.PAGE / "reduce_paths.py"
MISSING = why_unavailable()


def test_without_the_source_the_script_says_so_in_one_line_and_exits_2(tmp_path: Path):
    out = run_script(SCRIPT, VLLM_ASCEND_SRC=str(tmp_path))
    lines = out.stdout.splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr[-2000:]
    assert lines[0].startswith("reduce_paths: cannot be judged here: ") and "not found" in lines[0], lines


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_the_script_still_shows_its_causes():
    out = run_script(SCRIPT, VLLM_ASCEND_SRC=installed()["root"])  # type: ignore[index]
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("(widths 64, 36): [71, 71] on ranks 0, 1 (torch.argmax: 99)") == 3, out.stdout
    assert out.stdout.count("'IndexError: max(): Expected reduction dim 1 to have non-zero size.'") == 3, out.stdout
    assert "candidate values gives [128, 128] on ranks 0, 1 (torch.argmax: 200)" in out.stdout, out.stdout
    assert "RuntimeError: index -124 is out of bounds for dimension 1 with size 4" in out.stdout, out.stdout
    assert "tensor shapes differ across ranks: [1, 64] on rank 0, [1, 36] on rank 1" in out.stdout, out.stdout
    assert "[254, 127] tokens kept a row (classic: [200, 127] tokens kept a row)" in out.stdout, out.stdout
    assert "8 added at tp 2: [6, 6] on ranks 0, 1 (torch.argmax over every token: 130)" in out.stdout, out.stdout
    assert "[76, 83, 166, 249] kept (vLLM's order, top-p over what top-k kept: [83, 166])" in out.stdout, out.stdout


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_the_pages_failures_still_fail_on_replay_with_the_rule_they_recorded():
    assert_still_failing(Published(ascend_findings.PAGE).failures)
