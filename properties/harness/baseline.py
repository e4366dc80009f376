"""``--baseline``: a build of vLLM judged against the known causes, so that only what is new fails the run.

Every failure of a subject is looked up among what is known (:mod:`engines.vllm.releases.baseline`: the listed releases'
own runs, example by example; for vLLM's layer, a model of its known defects failing the example alike
(:func:`_modelled`); the pages' failures of the same subject, property and rule).  A claimed failure inside a
Hypothesis property is noted and the example counts as passed, so the search goes on past it and a new bug behind
a known one is still found; a claimed failure of any other test is an expected failure naming its cause.  What
nothing claims fails as always, with its repro file.  The summary says, per cause, how often it was met, and for
each cause not met whose subjects ran, what its standalone reproduction says now: ``fixed`` only where that runs
and exits 0.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis.errors import HypothesisException

from engines.versions import installed_vllm
from engines.vllm.causes import known_defects
from engines.vllm.causes.known_defects import MODELS, subsets
from engines.vllm.releases.baseline import (
    ITSELF,
    MODELLED,
    OPTIONS,
    answer,
    baseline_for,
    causes_of,
    example_key,
    judge_unmet,
    rule_class,
)
from properties.failures import env_of
from properties.harness.results import KNOWN as NOTE
from properties.harness.results import RESULTS, failure, known_of
from sharded.impls import load_impl

KEY = pytest.StashKey[object]()
UNMODELLED = ("test_rejects_bad_input",)  # the model checks input as the project does, not as the release
REPLAYS = ("test_repro_file_replays_clean",)  # properties/test_regressions.py: the repro folder's files again
RECORDED = "recorded"  # a failure no page claims, in a run that records a release's own (--baseline-record)
NEW = "tpargmax new failure"
SUBJECT = "tpargmax subject"
SUBJECTS = ("impl", "topk_impl", "sampling_impl")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("tpargmax").addoption(
        "--baseline",
        nargs="?",
        const="auto",
        default=None,
        metavar="RELEASE",
        help="judge failures against the known causes of the listed vLLM releases at or before the installed one "
        "(or of RELEASE, or those and a run --baseline-record wrote): a failure a known cause claims is noted, not "
        "failed, and the search goes on past it; exit 1 only for what is new",
    )
    parser.getgroup("tpargmax").addoption(
        "--baseline-record",
        metavar="PATH",
        help="with --baseline: every failure no known cause claims is recorded to PATH (added to what it holds) "
        "and the search goes on; on a listed release, its own run (docs/conformance/vllm-X-baseline.json), else "
        "a build of yours that --baseline PATH then judges another against",
    )


def pytest_configure(config: pytest.Config) -> None:
    choice = config.getoption("baseline")
    if choice is None:
        return
    config.option.only_subjects = True  # the build is judged, not the project: its own tests run without it
    try:
        config.stash[KEY] = baseline_for(choice)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The baseline judges what the properties search; replaying the repro files in the repro folder (this run's
    earlier finds, another build's) is ``tpargmax repro``'s."""
    if KEY not in config.stash:
        return
    replays = [item for item in items if getattr(item, "originalname", "") in REPLAYS]
    if replays:
        config.hook.pytest_deselected(items=replays)
        items[:] = [item for item in items if item not in replays]


def _subjects(item: pytest.Item) -> list:
    params = getattr(item, "callspec", None) and item.callspec.params or {}
    return [
        (OPTIONS[name], params[name].spec, tuple(sorted(env_of(params[name]).items())))
        for name in SUBJECTS
        if name in params
    ]


def _claim(item: pytest.Item, exc: BaseException) -> tuple[str | None, dict]:
    """The known cause that claims ``exc`` (or None: new; :data:`RECORDED` where this run records a release's own
    run) and the failure as the report keeps it, with its property and subjects."""
    seen = failure(exc, None)
    subjects = _subjects(item)
    seen.update(test=item.originalname, subjects=[list(s) for s in subjects])
    cause = item.config.stash[KEY].claim(subjects, item.originalname, seen)
    if cause is None and item.config.getoption("baseline_record"):
        cause = RECORDED
        spec = subjects[0][1] if subjects else ""
        seen["answers"] = {example_key(item.originalname, subjects, seen["replay"]): answer(seen, spec)}
    return cause, seen


def _modelled(inner, args: tuple, kwargs: dict, seen: dict) -> str | None:
    """The fewest of the release's causes whose model (``engines.vllm.causes.known_defects``) fails the example alike:
    the subject swapped for the model, the test run again; None where no model does, or the subject has none."""
    impl = kwargs.get("impl")
    defects = impl is not None and MODELS.get((OPTIONS["impl"], impl.spec, tuple(sorted(env_of(impl).items()))))
    if not defects:
        return None
    want = answer(seen, impl.spec)
    for kept in subsets(defects):
        model = load_impl(f"{known_defects.__name__}:{known_defects.name(kept)}")
        try:
            inner(*args, **{**kwargs, "impl": model})
        except HypothesisException:
            continue
        except Exception as exc:  # noqa: BLE001 - any failure of the model's is compared, none is raised
            if answer(failure(exc, None), model.spec) == want:
                return MODELLED + ("+".join(sorted(kept)) or "none")
    return None


def _note(cause: str, seen: dict, count: int = 1) -> dict:
    """What the summary and a run's record keep of a claimed failure: its rule, first case, and (recording) every
    example's answer."""
    keep = ("rule", "replay", "test", "subjects")
    return {"cause": cause, "count": count, "answers": {}, **{k: seen[k] for k in keep}}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A property's examples that fail for a known cause are noted and pass, so Hypothesis searches on."""
    hypothesis = getattr(getattr(item, "obj", None), "hypothesis", None)
    if KEY not in item.config.stash or hypothesis is None or not _subjects(item):
        return (yield)
    inner = hypothesis.inner_test
    met: dict[str, dict] = {}  # cause and rule -> its note

    @functools.wraps(inner)  # the same digest: a derandomized run draws the same examples
    def judged(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except HypothesisException:  # an assume() that failed, and the like: Hypothesis's own, not a failure
            raise
        except Exception as exc:
            cause, seen = _claim(item, exc)
            if (cause is None or cause == RECORDED) and item.originalname not in UNMODELLED:
                cause = _modelled(inner, args, kwargs, seen) or cause  # the release's causes, modelled
            if cause is None:
                raise
            note = met.setdefault(f"{cause} {rule_class(seen['rule'])}", _note(cause, seen, 0))
            note["count"] += 1
            note["answers"].update(seen.get("answers", {}))
            return None

    hypothesis.inner_test = judged
    try:
        return (yield)
    finally:
        hypothesis.inner_test = inner
        item.user_properties.extend((NOTE, json.dumps(note)) for note in met.values())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A test that failed only for known causes (one that is no Hypothesis property) is an expected failure."""
    report = yield
    if KEY not in item.config.stash or not report.failed or call.excinfo is None or report.when != "call":
        return report
    value = call.excinfo.value
    errors = value.exceptions if isinstance(value, BaseExceptionGroup) else [value]
    claims = [_claim(item, exc) for exc in errors]
    if not _subjects(item) or not all(cause for cause, _ in claims):
        # conftest wrote a repro file for each error that has a record, in order
        files = iter(text.splitlines()[0] for title, text in report.sections if title == "tpargmax repro file")
        for exc, (cause, seen) in zip(errors, claims, strict=True):
            repro = next(files, "") if hasattr(exc, "repro") else ""
            if cause is None:
                report.user_properties.append((NEW, json.dumps({"rule": seen["rule"], "repro": repro})))
    else:
        report.outcome = "skipped"
        report.wasxfail = "known cause " + ", ".join(sorted({cause for cause, _ in claims}))
        notes = [{**_note(cause, seen), "answers": seen.get("answers", {})} for cause, seen in claims]
        report.user_properties.extend((NOTE, json.dumps(note)) for note in notes)
        for entry in item.config.stash.get(RESULTS, []):  # --results-json kept it as failed: it failed for these
            if entry["nodeid"] == item.nodeid and entry["outcome"] == "failed":
                entry.update(outcome="passed", failures=[], known=[known_of(note) for note in notes])
    return report


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Each known cause met, fixed or still failing; and what is new."""
    baseline = config.stash.get(KEY, None)
    if baseline is None:
        return
    met: dict[str, list] = defaultdict(list)
    ran: set = set()
    for status in ("passed", "failed", "xfailed", "skipped"):
        for report in terminalreporter.stats.get(status, []):
            for name, value in getattr(report, "user_properties", ()):
                if name == NOTE:
                    note = json.loads(value)
                    met[note["cause"]].append((report.nodeid, note))
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        ran.update(tuple(json.loads(value)) for name, value in report.user_properties if name == SUBJECT)
    new = [r for r in terminalreporter.stats.get("failed", []) if r.when != "teardown"]
    write = terminalreporter.write_line
    terminalreporter.section(f"known causes: the baseline of vLLM {' and '.join(reversed(baseline.releases))}")
    for cause, notes in sorted(met.items()):
        name = f"{cause} met"
        if causes_of(cause) == [ITSELF]:
            name = ITSELF
        elif cause.startswith(MODELLED):
            kept = ", ".join(causes_of(cause))
            name = f"{kept} met (a model of the release's local path with {kept} in place fails alike)"
        elif cause.endswith("own run") or cause.startswith("the run recorded"):
            name = f"known from {cause} (its cause not read)"
        elif cause == RECORDED:
            name = f"recorded in {config.getoption('baseline_record')}"
        write(f"{name}: {sum(n['count'] for _, n in notes)} failure(s) in {len({i for i, _ in notes})} test(s)")
        for nodeid, note in notes:  # one per test and rule, with the first case that met it
            write(f"    {nodeid} [{note['rule']}] x{note['count']}")
            if note["replay"]:
                write(f"        replay: {note['replay']}")
    for cause, item in baseline.causes.items():
        subjects = {tuple(s[:2]) for s in baseline.subjects.get(cause, ())}
        if any(cause in causes_of(key) for key in met) or not subjects & ran:
            continue  # met, or none of its subjects ran: nothing to say of it here
        verdict, why = judge_unmet(item)
        write(f"{cause} {verdict}: {why}")
    if config.getoption("baseline_record"):
        record(config.getoption("baseline_record"), [n for notes in met.values() for _, n in notes])
    if new:
        write(f"NEW: {len(new)} failing test(s) that no known cause claims:")
        for report in new:
            write(f"    {report.nodeid}")
            for name, value in report.user_properties:
                if name == NEW:
                    seen = json.loads(value)
                    write(f"        [{seen['rule']}]" + (f" repro file: {seen['repro']}" if seen["repro"] else ""))
    else:
        write("new: none; every failure is a known cause's")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Which subjects each test ran, for the summary: a cause whose subjects did not run is not judged."""
    if KEY in item.config.stash:
        item.user_properties.extend((SUBJECT, json.dumps(s[:2])) for s in _subjects(item))


def record(path: str, notes: list[dict]) -> None:
    """A build's run: each failing example no page claims, with its answer, added to what ``path`` holds (one
    subject's run adds to another's); and for the properties no model stands for (bad input), each subject's rule
    by its kind, whatever the example."""
    release, file = installed_vllm(), Path(path)
    old = {"release": release, "answers": {}, "rules": []}
    old.update(json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {})
    if old["release"] != release:
        raise pytest.UsageError(f"{path} records vLLM {old['release']}'s run, and vLLM {release} is installed")
    rules = {json.dumps(rule) for rule in old["rules"]}
    for note in (n for n in notes if n["cause"] == RECORDED):
        old["answers"].update(note["answers"])
        if note["test"] in UNMODELLED:
            rules |= {
                json.dumps([*s[:2], dict(s[2]), note["test"], rule_class(note["rule"])]) for s in note["subjects"]
            }
    old["rules"] = [json.loads(rule) for rule in sorted(rules)]
    file.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n", encoding="utf-8")
