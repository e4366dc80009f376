"""tpu-inference's published page, what needs the engine: its standalone reproduction (jax and the wheel alone)
and its repro files' replays.  What needs no engine (the page renders from its JSON, a row for every subject, a repro
file for every failure) is :mod:`tests.test_published_pages`'.

Replaying and the script's verdict need the opt-in environment (``tpargmax install-tpu-inference``) and skip without
it, with that command as the reason.
"""

from __future__ import annotations

import pytest

from engines.tpu_inference.causes import findings as tpu_inference_findings
from engines.tpu_inference.wheel import adapter as tpu_inference
from tests.published import Published, assert_still_failing
from tests.suite import ROOT, run_script

PUBLISHED = Published(tpu_inference_findings.PAGE)
FAILURES, SCRIPTS = PUBLISHED.failures, PUBLISHED.scripts
MISSING = tpu_inference.why_unavailable()


@pytest.mark.parametrize("script", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_without_jax_a_script_says_so_in_one_line_and_exits_2(script):
    fixture = ROOT / "tests" / "fixtures" / "without_engines"
    out = run_script(script, PYTHONPATH=str(fixture), WITHOUT="jax,jaxlib,tpu_inference")
    lines = out.stdout.splitlines()
    assert out.returncode == 2 and len(lines) == 1 and out.stderr == "", out.stdout + out.stderr[-2000:]
    assert ": cannot be judged here: " in lines[0] and lines[0].endswith("not installed"), lines


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
@pytest.mark.parametrize("script", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_each_standalone_script_still_shows_its_causes(script):
    out = run_script(script)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_the_failures_still_fail_on_replay_with_the_rule_they_recorded():
    assert_still_failing(FAILURES)
