"""A build the suite cannot start is said once, up front, in one line with what it needs: never a verdict per
property, never a rank waited on until a timeout (a start-up that raises on the ranks: tests/test_pool.py).  Shown
with a stand-in vLLM that refuses this machine as 0.34.0's does (``tests/fixtures/refusing_vllm``), whatever this
machine has installed."""

from __future__ import annotations

import re

import pytest

from engines.vllm.subjects import layer
from sharded.impls import Impl
from tests.suite import ROOT, run_in_its_folder
from tpargmax.report import scripts as standalone

REFUSING = str(ROOT / "tests" / "fixtures" / "refusing_vllm")
TIMEOUT = 600  # seconds: imports in child processes on a loaded two-core machine; bounds a hang, never a speed
FROBNICATOR = "RuntimeError: this build needs the frobnicator kernels (at vllm/platforms/cpu.py:8)"


def refuses_to_start(**kwargs):
    """An implementation whose preflight refuses this machine."""
    raise AssertionError("never called: its preflight refused")


refuses_to_start.preflight = lambda: "it needs the frobnicator kernels"


def test_a_refusing_build_is_said_in_one_line_and_the_triton_cpu_check_is_answered(monkeypatch) -> None:
    """The preflight asks a child process to start vLLM as a rank does: a refusal comes back as one line naming the
    build, what it raised and where.  vLLM 0.34.0's Triton check (the CPU model runner's kernels, which the head never
    reaches), which the stand-in raises first, is the one refusal answered: the line is the refusal after it."""
    monkeypatch.setattr(layer, "vllm_available", lambda: True)
    monkeypatch.setenv("PYTHONPATH", REFUSING)
    monkeypatch.delenv(layer.STARTS_ENV, raising=False)
    assert layer.cannot_start.__wrapped__() == f"vLLM 0.34.0+refusing cannot start here: {FROBNICATOR}"


def test_a_refusal_stops_the_run_before_any_rank_starts_asked_once(monkeypatch) -> None:
    import conftest

    asked = []
    monkeypatch.setattr(refuses_to_start, "preflight", lambda: asked.append(1) or "it needs the frobnicator kernels")
    impl = Impl("tests.test_start_refused:refuses_to_start", refuses_to_start)
    with pytest.raises(pytest.UsageError, match="refuses_to_start: it needs the frobnicator kernels"):
        conftest._refuse_what_cannot_start([impl, impl])
    assert asked == [1]
    monkeypatch.setattr(layer, "vllm_available", lambda: False)
    assert layer.cannot_start.__wrapped__() is None  # vLLM absent is why_unavailable's to say


def test_a_script_whose_vllm_refuses_to_start_says_so_at_once() -> None:
    """A cause's reproduction on such a build: exit 2 with one line, as soon as a rank hears the refusal, never
    after waiting out its timeout for rank 0."""
    script = next(s for s in standalone.every_script() if s.cause == "V3")
    done = run_in_its_folder(standalone.path_of(script), TIMEOUT, PYTHONPATH=REFUSING)
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    line = rf"V3: cannot be judged here: vLLM cannot start on rank \d: {re.escape(FROBNICATOR.split(' (at')[0])} at "
    assert len(done.stdout.splitlines()) == 1 and re.match(line, done.stdout), done.stdout
