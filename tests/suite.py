"""Run the suite as a user would: in a subprocess from the checkout, or one property in-process."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from groups.simulated import run_simulated
from properties.failures import ImplementationHung
from properties.harness.profiles import backend_budget, running_with
from sharded.impls import Impl, load_impl
from sharded.layout import vocab_parallel_layout
from tests import forked_runs

ROOT = Path(__file__).resolve().parent.parent


def _not_a_listed_release() -> str | None:
    from engines.versions import unlisted_vllm
    from engines.vllm.subjects.layer import INSTALL_HINT, vllm_available

    return unlisted_vllm() if vllm_available() else INSTALL_HINT


# What a listed release's page records (its repro files fail, its scripts exit 1) is judged where that release runs:
# skipped without vLLM (the install command), and with a build no page records, which may have fixed a cause.
_UNLISTED = _not_a_listed_release()
ON_A_LISTED_RELEASE = pytest.mark.skipif(_UNLISTED is not None, reason=_UNLISTED or "")


def committed_repro_files(root: Path = ROOT) -> list[Path]:
    """The JSON files directly under ``root/repro`` that git tracks: the project's own finds.  A user's run writes
    its finds there too, untracked, and they are not the project's to judge (outside a git checkout: every file)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "repro/*.json"], cwd=root, capture_output=True, text=True, timeout=60
        )
    except OSError:
        listed = None
    if listed is None or listed.returncode != 0:
        return sorted((root / "repro").glob("*.json"))
    return sorted(root / name for name in listed.stdout.split("\0") if name and "/" not in name[len("repro/") :])


def run_in_its_folder(path: Path, timeout: float, **env: str) -> subprocess.CompletedProcess:
    """A standalone script run as a user runs it, from its folder, with ``env`` added to this environment."""
    return subprocess.run(
        [sys.executable, path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


def run_forked(path: Path, timeout: float, without: str) -> subprocess.CompletedProcess:
    """``python NAME`` from the script's folder where the packages ``without`` (comma-separated) were never installed,
    as tests/fixtures/without_engines makes them, in a process of its own whose exit status and output are the
    script's: forked from the one that imported torch once (:mod:`tests.forked_runs`), so a script that imports torch
    before it asks for what it needs costs no second import."""
    code = f"import os, runpy, sys; sys.modules.update(dict.fromkeys({without.split(',')!r}))\n"
    code += f"sys.path[0], sys.argv = {str(path.parent)!r}, [{path.name!r}]; os.chdir(sys.path[0])\n"
    code += f"runpy.run_path({str(path)!r}, run_name='__main__')"  # __file__ absolute, as Python makes it
    with tempfile.TemporaryDirectory(prefix="tpargmax-test-") as tmp:
        return forked_runs.run([sys.executable, "-c", code], dict(os.environ), ROOT, timeout, Path(tmp))


def top_level_imports(text: str) -> set[str]:
    """The top-level packages a script's source imports (``vllm`` for ``from vllm.x import y``)."""
    tree = ast.parse(text)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return imported | {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def process_state(pid: int) -> tuple[str, int] | None:
    """``(state, process group)`` of a process from ``/proc/PID/stat``, or None once it is gone.  A process can end
    between any two reads: its entry then vanishes (FileNotFoundError) or the read of its open ``stat`` raises
    ProcessLookupError, and both mean gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[2])


def clear_settings(monkeypatch) -> None:
    """Take the caller's TPARGMAX_* settings out of this process's environment for the test (as :func:`run` does
    for its commands); monkeypatch puts them back."""
    for name in [k for k in os.environ if k.startswith("TPARGMAX_")]:
        monkeypatch.delenv(name)


def fork_the_commands(monkeypatch) -> None:
    """For the test: the pytest runs that ``tpargmax fuzz`` and ``tpargmax coverage`` start are forked from the
    process that imported torch (:mod:`tests.forked_runs`), as :func:`run`'s commands are."""
    from tpargmax import coverage
    from tpargmax.fuzz import campaign as fuzz

    for module in (fuzz, coverage):
        monkeypatch.setattr(module, "Popen", forked_runs.popen)


def run(cmd: list[str], *, fresh: bool = False, **env: str) -> subprocess.CompletedProcess:
    """``cmd`` in the checkout, without the caller's TPARGMAX_* settings; a ``python -m``/``-c`` command is forked
    from a process that imported torch once (:mod:`tests.forked_runs`), any other, or any with ``fresh``, runs as a
    plain subprocess: ``fresh`` where the test judges what a new interpreter prints as it starts (torch's notices).

    Repro files and any example database go to a temporary directory, removed afterwards, so that a run
    neither litters the checkout nor depends on what earlier runs left there.
    """
    with tempfile.TemporaryDirectory(prefix="tpargmax-test-") as tmp:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TPARGMAX_")},
            "TPARGMAX_REPRO_DIR": os.path.join(tmp, "repro"),
            "TPARGMAX_DB": os.path.join(tmp, "examples"),
            **env,
        }
        if not fresh and (done := forked_runs.run(cmd, env, ROOT, 300, Path(tmp))) is not None:
            return done
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def run_suite(*args: str, profile: str | None = "ci", **env: str) -> subprocess.CompletedProcess:
    """``python -m pytest -p no:xdist -q ARGS``; the ``ci`` profile is derandomised and has no example database,
    so what the run finds does not depend on a seed."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", *args]
    if profile:
        cmd += ["--hypothesis-profile", profile]
    return run(cmd, **env)


FIND_ONLY = settings(
    settings.get_profile("ci"),
    phases=(Phase.explicit, Phase.generate),
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)


# deliberately broken: argmax, top-k, samplers, the layouts beyond one even split
BROKEN = ("tests.broken", "tests.broken_top_k", "tests.broken_sampling", "tests.broken_layouts")


def broken_spec(name: str) -> str:
    """``MODULE:name`` for a broken implementation named by itself."""
    return next(f"{m}:{name}" for m in BROKEN if hasattr(importlib.import_module(m), name))


class _Found(BaseException):
    """A property's first failure, past Hypothesis: a BaseException ends the search at once, without the replay of
    the failing example (the implementation, the oracle and the diagnosis run again) that reports it."""


@contextmanager
def _first_failure_ends_the_run(prop) -> Iterator[None]:
    """While inside, Hypothesis test ``prop`` raises :class:`_Found` at its first failure (Hypothesis calls the
    test it wraps through ``prop.hypothesis.inner_test``, there to be wrapped)."""
    handle = getattr(prop, "hypothesis", None)
    if handle is None:
        yield
        return
    inner = handle.inner_test

    @functools.wraps(inner)
    def ends(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except AssertionError as exc:
            raise _Found(str(exc)) from exc

    handle.inner_test = ends
    try:
        yield
    finally:
        handle.inner_test = inner


def failure(prop, impl: str | Impl, budget: settings = FIND_ONLY) -> str:
    """Run ``prop`` as the suite would, on the simulated group, against ``impl`` (a broken implementation's name, a
    spec or an :class:`Impl`); the message it failed with, or ''."""
    broken = impl if isinstance(impl, Impl) else load_impl(impl if ":" in impl else broken_spec(impl))
    given = {"impl": broken, "backend": "sim", "topk_impl": load_impl("topk_pairs")}
    given["sampling_impl"] = load_impl("candidates")
    wants = inspect.signature(broken.fn).parameters
    if "k" in wants or "sampling" in wants:  # a top-k implementation or a sampler: the argmax side is correct
        given.update(topk_impl=broken if "k" in wants else given["topk_impl"], impl=load_impl("vllm_pairs"))
        given["sampling_impl"] = broken if "sampling" in wants else given["sampling_impl"]
    given["request"] = SimpleNamespace(node=SimpleNamespace(user_properties=[]))  # the d2t findings' sink
    try:
        with (
            running_with(prop, budget) if hasattr(prop, "hypothesis") else nullcontext(),
            backend_budget(prop, "sim"),
            _first_failure_ends_the_run(prop),
        ):
            prop(**{name: given[name] for name in inspect.signature(prop).parameters})
    except (AssertionError, ImplementationHung, _Found) as exc:
        return str(exc)
    return ""


def verdicts(stdout: str, files: list) -> dict[str, str]:
    """What ``tpargmax repro`` said of each file in its output: the rule it still fails with (``[...]``) or
    ``fixed``; a file it said nothing of is missing."""
    said, current = {}, None
    for line in stdout.splitlines():
        current = next((str(f) for f in files if line.startswith(f"{f}: ")), current)
        if current and line.startswith("  STILL FAILING: "):
            said[current] = line.removeprefix("  STILL FAILING: ")
        elif current and line.startswith("  fixed: "):
            said[current] = "fixed"
    return said


def sample_on_logits(fn, logits: torch.Tensor, tp: int, sampling, timeout: float) -> list:
    """Every rank's output of sampler ``fn`` on a simulated group of ``tp`` whose head gives exactly ``logits``:
    hidden = the logits, each token's weight row one-hot."""
    vocab = logits.shape[1]
    layouts = vocab_parallel_layout(vocab, tp)

    def rank(group):
        layout = layouts[group.rank]
        weight = torch.zeros(layout.size, vocab)
        weight[layout.token_rows()] = torch.eye(vocab)[layout.token_ids()]
        return fn(hidden=logits, weight=weight, bias=None, layout=layout, sampling=sampling, group=group)

    return run_simulated(rank, tp, timeout)[0]


def run_script(script, **env):
    """The script as a user runs it, from its folder, with the engine alone (not the project) on the path."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}, **env}
    return subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True, text=True, timeout=1800
    )
