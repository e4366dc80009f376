"""The run's settings and fixtures: which implementation is under test, on which backend, and what the run reports.

The options (``--impl``, ``--backend``, ...) are ``properties/harness/options.py``'s.  Test ids read like
``test_token_exact[packed_key-gloo]``.
"""

from __future__ import annotations

import os
import sys

# A run is a hundred processes or so that import the project (xdist's workers, the rank pools' fork servers, the
# commands the tests start), and pytest rewrites every test module in every worker.  Where PYTHONDONTWRITEBYTECODE
# is set, as on many CI images, each compiled it all again (collecting the suite: 3.4 to 3.7 s of CPU without the
# caches, 2.3 s with them, measured here).  So the run writes bytecode to __pycache__ (ignored by git), for itself
# and for every process it starts, before importing the project.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import gc
import importlib
import pkgutil
import random

import pytest
import torch
from hypothesis import settings
from hypothesis._settings import is_in_ci

from groups.devices import check_backend, check_device
from groups.pool import close_all_pools
from properties.harness import coverage, example_db, results
from properties.harness import settings as run_settings
from properties.harness.fuzz_shards import shard_of
from properties.harness.profiles import backend_budget  # importing it registers dev, ci and nightly
from properties.sampling.checks import noise_key_of, token_noise
from sharded.impls import load_impl
from sharded.local_argmax import DEFAULT_IMPLS
from sharded.local_sampling import DEFAULT_SAMPLING_IMPLS
from sharded.local_top_k import DEFAULT_TOPK_IMPLS

SUBJECTS = ("impl", "topk_impl", "sampling_impl")  # the fixtures that hold an implementation under test
TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests")  # the project's own tests
# the run's options; --e2e; --baseline: known causes
pytest_plugins = ("properties.harness.options", "properties.e2e.plugin", "properties.harness.baseline")
# xdist's workers share the cores (one more than there are: pytest_xdist_auto_num_workers): one intra-op thread each.
torch.set_num_threads(1)


# Hypothesis now and then draws a constant found in the source of the project's imported modules, and looks again
# whenever more are imported.  Imported all at once, before any test, the pool is the same in every process: else
# what a property draws would depend on what earlier tests in the same xdist worker happened to import, and a
# derandomized run could find a planted bug in one run and miss it in the next (measured: importing tpargmax.cli
# first hid tests.broken:nan_lost_in_blocks from TP invariance).
SUITE_PACKAGES = ("reference", "sharded", "groups", "benchmarks", "properties", "engines", "tpargmax", "examples")


def import_the_suite() -> None:
    """Import every module of the suite's packages but the tests and ``__main__``, so that every process sees the
    same constants.  A module that cannot import here stays out, alike in every process: an opt-in engine's whose
    package is absent, or one that refuses its environment (vLLM's Triton kernels where Triton is and vLLM is not
    raise RuntimeError); a test that needs it imports it and says why."""
    for package in SUITE_PACKAGES:
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}.", onerror=str):
            leaf = info.name.rpartition(".")[2]
            if leaf != "__main__" and not leaf.startswith("test_"):
                try:
                    importlib.import_module(info.name)
                except Exception:  # noqa: BLE001, S110 - see above: only the constants are at stake here
                    pass


def pytest_configure(config: pytest.Config) -> None:
    from properties.e2e import plugin as e2e  # here, not above: pytest imports its plugins itself, to rewrite them

    import_the_suite()
    if (why := example_db.problem()) is not None:  # a shared database that cannot be used: say so, never fall back
        raise pytest.UsageError(why)
    record = os.environ.get(coverage.COVERAGE_ENV)
    statistics = config.getoption("hypothesis_show_statistics", False) and os.environ.get(coverage.EVENTS_ENV) != "off"
    if record:
        coverage.record_to(record)
    if config.getoption("results_json"):
        config.stash[results.RESULTS] = []
    if config.getoption("hypothesis_profile", None) is None and not is_in_ci():
        settings.load_profile("dev")
    profile = config.getoption("hypothesis_profile", None) or settings.get_current_profile_name()
    if config.getoption("max_examples"):
        settings.register_profile(profile, settings.get_profile(profile), max_examples=config.getoption("max_examples"))
        settings.load_profile(profile)
    nightly = profile == "nightly"
    try:
        device = check_device(config.getoption("device"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    given = config.getoption("backend") or ("sim" if device != "cpu" else "sim,gloo")
    backends = tuple(b.strip() for b in given.split(",") if b.strip())
    unknown = set(backends) - set(run_settings.BACKENDS)
    if unknown or not backends:
        raise pytest.UsageError(f"--backend: choose from {', '.join(run_settings.BACKENDS)}, got {sorted(unknown)}")
    job = run_settings.current().torchrun_job  # set by properties.torchrun before it starts pytest
    if "torchrun" in backends and job is None:
        raise pytest.UsageError("--backend torchrun: start the suite with torchrun -m properties.torchrun")
    try:
        check_backend(backends, device)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if job is not None and job.device.type != device:
        raise pytest.UsageError(
            f"--device {device}, but the torchrun job's ranks run on {job.device.type}: "
            "give torchrun -m properties.torchrun the same --device"
        )
    impls = _impls(config.getoption("impl"), DEFAULT_IMPLS)
    topk_impls = _impls(config.getoption("topk_impl"), DEFAULT_TOPK_IMPLS)
    sampling_impls = _impls(config.getoption("sampling_impl"), DEFAULT_SAMPLING_IMPLS)
    if not hasattr(config, "workerinput"):  # once, in the process that starts the run, before any rank starts
        _refuse_what_cannot_start([*impls, *topk_impls, *sampling_impls])
    try:
        pinned = run_settings.pinned_head([*impls, *topk_impls, *sampling_impls])
        layouts = run_settings.parse_layouts(config.getoption("layouts"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    run_settings.configure(
        impls=impls,
        topk_impls=topk_impls,
        sampling_impls=sampling_impls,
        backends=backends,
        device=device,
        collective_timeout=config.getoption("collective_timeout"),
        gloo_tps=_ints(config.getoption("gloo_tps") or ("2,4,8" if nightly else "2,4"), "--gloo-tps"),
        heads=config.getoption("heads"),
        layouts=layouts,
        pinned=pinned,
        repro_dir=config.getoption("repro_dir"),
        listening=bool(record or statistics),
        e2e_groups=e2e.groups(config),
    )


def _impls(option: str | None, default: tuple[str, ...]) -> tuple:
    specs = [s.strip() for s in (option or ",".join(default)).split(",") if s.strip()]
    try:
        return tuple(load_impl(s) for s in dict.fromkeys(specs))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _refuse_what_cannot_start(impls: list) -> None:
    """A selected implementation whose start-up cannot succeed here (an engine build that refuses this machine) stops
    the run at once, in one line that says what it needs: every property would otherwise wait on ranks that never
    start.  Each preflight is asked once, however many subjects share it."""
    asked: dict[object, str | None] = {}
    for impl in impls:
        check = getattr(impl.fn, "preflight", None)
        if check is not None and check not in asked:
            asked[check] = impl.cannot_start()
            if asked[check]:
                raise pytest.UsageError(f"{impl}: {asked[check]}")


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise pytest.UsageError(f"{option}: expected comma-separated ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise pytest.UsageError(f"{option}: sizes must be >= 1, got {text!r}")
    return values


def pytest_sessionfinish(session: pytest.Session) -> None:
    close_all_pools()  # no rank process outlives the run
    if session.config.getoption("results_json"):
        results.save(session.config, session.config.getoption("results_json"))


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = run_settings.current()
    return [
        f"tpargmax: implementation(s) under test: {', '.join(i.spec for i in run.impls)}; "
        f"top-k: {', '.join(i.spec for i in run.topk_impls)}; "
        f"sampling: {', '.join(i.spec for i in run.sampling_impls)}; heads: {run.heads}; "
        f"backends: {', '.join(run.backends)} (gloo tps {run.gloo_tps}); device: {run.device}; "
        f"hypothesis profile: {settings.get_current_profile_name()}",
        *(
            f"tpargmax: named divergence: {i.spec} keys its noise by {noise_key_of(i)}, not by token id: its sampled "
            "tokens are judged by their support and distribution, its greedy rows token for token"
            for i in run.sampling_impls
            if not token_noise(i)
        ),
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    run = run_settings.current()
    for fixture, impls in (("impl", run.impls), ("topk_impl", run.topk_impls), ("sampling_impl", run.sampling_impls)):
        if fixture in metafunc.fixturenames:
            metafunc.parametrize(fixture, impls, ids=[i.spec for i in impls])
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", run.backends)


def read_xfails(path: str) -> list[tuple[str, str]]:
    """``(test id substring, reason)`` pairs; every entry needs a reason."""
    entries = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            pattern, _, reason = line.partition("#")
            if not pattern.strip():
                continue
            if not reason.strip():
                raise pytest.UsageError(f"{path}:{number}: give a reason after '#' for {pattern.strip()!r}")
            entries.append((pattern.strip(), reason.strip()))
    return entries


@pytest.fixture
def kept_settings():
    """For a test that configures the run's settings (conftest's pytest_configure, a command run in this process):
    the run's own come back after it."""
    with run_settings.changed() as run:
        yield run


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown where it is off (-p no:xdist)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: a worker more than the CPUs.  A worker spends part of the run waiting: on the commands its tests
    start, on its rank processes, on the timeouts the hang tests wait out (measured on two cores: 6 % of the machine
    idle with two workers, 2 % with three, the run 3 to 7 % shorter).  PYTEST_XDIST_AUTO_NUM_WORKERS still decides."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cpus + 1


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, Hypothesis, the project) lives as long as the run: frozen, the garbage
    collector's full passes no longer walk it (they were 4 % of a property run's time, half after this)."""
    gc.collect()
    gc.freeze()
    if any(str(item.path).startswith(TESTS + os.sep) for item in session.items):
        # the project's own tests fork their commands from a process that imported torch once: a rank pool's fork
        # server comes from there too (one torch import fewer per test process)
        from tests.forked_runs import stand_in_fork_server

        stand_in_fork_server()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("only_subjects"):
        keep = [i for i in items if set(SUBJECTS) & set(getattr(i, "fixturenames", ()))]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    if config.getoption("shard_tests"):
        try:
            mine = set(shard_of([i.nodeid for i in items], config.getoption("shard_tests")))
        except ValueError as exc:
            raise pytest.UsageError(f"--shard-tests: {exc}") from None
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in mine])
        items[:] = [i for i in items if i.nodeid in mine]
    for item in items:
        params = getattr(item, "callspec", None) and item.callspec.params or {}
        impls = [params[name] for name in SUBJECTS if name in params]
        if params.get("backend") == "sim" and any(impl.process_bound for impl in impls):
            item.add_marker(pytest.mark.skip(reason="needs a process per rank (an engine): runs on gloo and torchrun"))
        elif params.get("backend") == "torchrun" and getattr(item, "originalname", "") == "test_tp_invariance":
            item.add_marker(pytest.mark.skip(reason="a torchrun job has one tp, and TP invariance compares two"))
        elif item.get_closest_marker("own_head") and run_settings.current().pinned:  # a model class's head, for all
            whose = "the implementation" if any(i.head for i in impls) else "a model class of this run, for every case,"
            why = f"{whose} fixes its head (a model class): this property sizes or changes it"
            item.add_marker(pytest.mark.skip(reason=why))
        elif item.get_closest_marker("local_path") and any(impl.classic for impl in impls):
            item.add_marker(pytest.mark.skip(reason="a classic path scatters through d2t before its argmax"))
        elif (why := _subject_skip(item, impls)) is not None:
            item.add_marker(pytest.mark.skip(reason=why))
    fuzz_seed = config.getoption("fuzz_seed")
    if fuzz_seed is not None:
        # Seed the generator Hypothesis draws each test's seed from. @seed and --hypothesis-seed would
        # turn the example database off, and fuzzing must save its finds there.
        import hypothesis.core

        hypothesis.core.threadlocal._hypothesis_global_random = random.Random(fuzz_seed)
    path = config.getoption("xfails_file")
    if not path:
        return
    for pattern, reason in read_xfails(path):
        for item in items:
            if pattern in item.nodeid:
                item.add_marker(pytest.mark.xfail(reason=f"known failure ({path}): {reason}", strict=True))


def _subject_skip(item: pytest.Item, impls: list) -> str | None:
    """Why a layout's property does not run the implementations (settings.layout_refusal), or a property that does
    not judge one (``Impl.refuses_property``), or None."""
    marker = item.get_closest_marker("layout")
    why = None if marker is None else run_settings.layout_refusal(marker.args[0], impls)
    name = getattr(item, "originalname", getattr(item, "name", ""))
    return why or next((w for impl in impls if (w := impl.refuses_property(name)) is not None), None)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Flagged d2t findings: expected results of the d2t properties, shown rather than raised."""
    findings = [
        (report.nodeid, value)
        for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
        if report.when == "call"
        for name, value in report.user_properties
        if name == "d2t finding"
    ]
    if findings:
        terminalreporter.section("flagged d2t findings (non-monotone tables, as expected)")
        terminalreporter.write_line(f"{len(findings)} test(s) flagged a table; the first:")
        terminalreporter.write_line(f"  {findings[0][0]}: {findings[0][1]}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A property on a process group runs its backend's share of the profile's examples."""
    callspec = getattr(item, "callspec", None)
    with backend_budget(item.obj, callspec.params.get("backend") if callspec else None):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Write every property failure as a standalone repro file, and say where in the report."""
    report = yield
    replaying = item.originalname == "test_repro_file_replays_clean"  # its case has a file already
    recorded = []
    if report.failed and call.excinfo is not None:
        from properties.repro import records as repro

        errors = (
            call.excinfo.value.exceptions
            if isinstance(call.excinfo.value, BaseExceptionGroup)
            else [call.excinfo.value]
        )
        for exc in errors:
            path = None
            if hasattr(exc, "repro") and report.when == "call" and not replaying:
                notes = "\n".join(getattr(exc, "__notes__", []))
                blob = next((line.strip() for line in notes.splitlines() if "@reproduce_failure" in line), None)
                try:
                    path = repro.write(run_settings.current().repro_dir, exc.repro, blob, item.originalname)
                except Exception as error:  # a dead CUDA context (a device-side assert) cannot copy the tensors
                    why = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                    report.sections.append(("tpargmax repro file", f"not written ({why}): the case above replays"))
                else:
                    report.sections.append(("tpargmax repro file", f"{path}\nreplay: tpargmax repro {path}"))
            recorded.append((exc, None if path is None else str(path)))
    results.record(item, report, recorded)
    return report
