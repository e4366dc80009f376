"""sharded/triton_env.py: the interpreter switch, the reasons a Triton subject cannot run, and the one lock that
every Triton loader and launch takes.

No Triton needed: the loaders' inner steps (SGLang's file execution, vLLM's ``_real_triton`` swap) are replaced by
steps that record when they run, and the checks before them by None.  Each handshake is made of Events, so no
outcome depends on how fast the machine is; ``WAIT`` only bounds a hung test.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

from engines.sglang.wheel import kernels as sglang
from engines.sglang.wheel import runtime as sglang_sampling_wheel
from engines.vllm.subjects import dflash2_sampler, gumbel
from engines.vllm.wheel import triton_files
from sharded import triton_env, triton_key

WAIT = 60.0  # seconds: how long a handshake may take before the test calls it hung


@pytest.mark.parametrize(("value", "on"), [("1", True), ("0", False), ("", False), (None, False)])
def test_the_interpreter_check_reads_triton_interpret(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    assert triton_env.interpreting() is on


def test_the_reason_names_the_subject_and_what_is_missing(monkeypatch):
    monkeypatch.setattr(triton_env, "triton_imports", lambda: False)
    assert triton_env.why_unavailable("triton_key") == triton_env.not_installed("triton_key")
    assert "pip install triton" in triton_key.why_unavailable()
    assert "install-samplers" in triton_env.why_unavailable("vLLM's", triton_files.INSTALL_COMMAND)
    monkeypatch.setattr(triton_env, "triton_imports", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert triton_env.why_unavailable(sglang.TRITON_SUBJECT) == sglang.DEVICE_HINT
    assert "TRITON_INTERPRET=1" in sglang.DEVICE_HINT and "pip install triton" in sglang.TRITON_HINT
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    numpy = triton_env.importlib.util.find_spec("numpy") is not None
    assert triton_env.why_unavailable("x") == (None if numpy else triton_env.not_installed("x", package="NumPy"))


def test_every_triton_user_takes_the_one_lock():
    for module in (triton_key, sglang, sglang_sampling_wheel, triton_files, gumbel, dflash2_sampler):
        assert module.TRITON_LOCK is triton_env.TRITON_LOCK, module.__name__
    assert not hasattr(sglang, "_LAUNCH") and not hasattr(triton_files, "LAUNCH")
    with triton_env.TRITON_LOCK, triton_env.TRITON_LOCK:  # reentrant: a launch may load its kernels first
        pass


class _Watched:
    """A module's lock, watched: ``blocked`` is set when an entry finds it held by another thread."""

    def __init__(self, lock, blocked: threading.Event) -> None:
        self.lock, self.blocked = lock, blocked

    def __enter__(self):
        if not self.lock.acquire(blocking=False):
            self.blocked.set()
            assert self.lock.acquire(timeout=WAIT), "the lock was never released"
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()


def _loaders(monkeypatch, tmp_path: Path, first: str):
    """SGLang's ``load_kernels`` and vLLM's ``load``, with their patching steps recording "<path> in/out" events.

    The ``first`` path's step, once in, waits until the other path has either entered its own step or found the
    lock held (``progress``); the other path's step sets ``progress`` as it enters.  Returns the events, the
    Events ``inside`` (the first path is in its step) and ``progress``, and the two loaders by path."""
    events: list[str] = []
    inside, progress = threading.Event(), threading.Event()

    def step(path: str) -> None:
        events.append(f"{path} in")
        if path == first:
            inside.set()
            assert progress.wait(WAIT), "the other loader never came"
        else:
            progress.set()

    def execute(name: str, file: Path) -> types.ModuleType:
        if name == "softcap_row_argmax":
            step("sglang")
        else:
            events.append("sglang in")
        events.append("sglang out")
        return types.ModuleType(name)

    @contextlib.contextmanager
    def real_triton(stands_for):
        step("vllm")
        yield
        events.append("vllm out")

    monkeypatch.setattr(sglang, "why_unavailable", lambda: None)
    monkeypatch.setattr(sglang, "kernel_paths", lambda: {"softcap_row_argmax": tmp_path, "softcap": tmp_path})
    monkeypatch.setattr(sglang, "_execute", execute)
    monkeypatch.setattr(triton_files, "why_unavailable", lambda: None)
    monkeypatch.setattr(triton_files, "vllm_dir", lambda: tmp_path)
    monkeypatch.setattr(triton_files, "_real_triton", real_triton)
    (tmp_path / triton_files.GUMBEL).parent.mkdir(parents=True)
    (tmp_path / triton_files.GUMBEL).write_text("")
    name = "tpargmax_vllm_" + triton_files.GUMBEL.removesuffix(".py").replace("/", "_")
    monkeypatch.setitem(sys.modules, name, None)  # load() puts the empty file there: put back what was
    calls = {
        "sglang": sglang.load_kernels.__wrapped__,  # past the cache: run the loader itself
        "vllm": lambda: triton_files.load.__wrapped__(triton_files.GUMBEL),
    }
    return events, inside, progress, calls


def _run(fn, errors: list[BaseException]) -> threading.Thread:
    def body() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("separate", [False, True], ids=["one lock", "separate locks"])
@pytest.mark.parametrize("first", ["sglang", "vllm"])
def test_two_loaders_at_once_never_interleave(monkeypatch, tmp_path, first, separate):
    """SGLang's loader and vLLM's, on two threads, one entering while the other is inside its patching step: with
    the one lock the second waits until the first is out; given a lock of its own (the negative), the SGLang path
    lets them interleave, which this test sees."""
    events, inside, progress, calls = _loaders(monkeypatch, tmp_path, first)
    if separate:
        monkeypatch.setattr(sglang, "TRITON_LOCK", threading.RLock())
    for module in (sglang, triton_files):
        monkeypatch.setattr(module, "TRITON_LOCK", _Watched(module.TRITON_LOCK, progress))
    second = "vllm" if first == "sglang" else "sglang"
    errors: list[BaseException] = []
    threads = [_run(calls[first], errors)]
    assert inside.wait(WAIT), errors
    threads.append(_run(calls[second], errors))
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a loader hung"
    assert not errors, errors
    runs = [side for i, side in enumerate(e.split()[0] for e in events) if i == 0 or events[i - 1].split()[0] != side]
    assert sorted(events) == sorted(["sglang in", "sglang out"] * 2 + ["vllm in", "vllm out"])
    if separate:
        assert len(runs) > 2, events  # the second path's step ran inside the first's
    else:
        assert runs == [first, second], events
