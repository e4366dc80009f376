"""The pytest side of the end-to-end wing (``--e2e``): its options, its collection, vLLM's engines as a session fixture.

Registered from the root conftest (``pytest_plugins``).  Without ``--e2e`` it only adds its options and keeps the
end-to-end modules from being imported; the engines' groups it chooses go into the run's settings through
:func:`groups`, which the root conftest's ``pytest_configure`` calls.
"""

from __future__ import annotations

import importlib.util

import pytest

from engines.vllm.e2e.engine import DTYPES, EngineSpec
from engines.vllm.e2e.pool import EnginePool
from engines.vllm.e2e.scenario import METHODS
from properties.harness import settings as run_settings

MODULES = ("properties/test_e2e.py", "tests/test_e2e_power.py")  # collected only with --e2e
ENGINES = pytest.StashKey[EnginePool]()
NEEDS_E2E = "vLLM's engine end to end runs with --e2e: tpargmax e2e"


def is_e2e_module(path) -> bool:
    return any(str(path).endswith(m) for m in MODULES)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tpargmax")
    group.addoption(
        "--e2e",
        action="store_true",
        help="also collect vLLM's engine end to end (properties/test_e2e.py, tests/test_e2e_power.py): speculative "
        "decoding with use_local_argmax_reduction on and off, in one process, in vLLM's environment (tpargmax e2e)",
    )
    group.addoption(
        "--e2e-methods",
        default=",".join(METHODS),
        help="speculative methods the end-to-end properties run (default %(default)s)",
    )
    group.addoption(
        "--e2e-dtypes",
        default=",".join(DTYPES),
        help="dtypes the end-to-end properties run (default %(default)s)",
    )


def groups(config: pytest.Config) -> tuple[tuple[str, str], ...]:
    """The end-to-end groups, (dtype, method), in the order they run; none without --e2e.  --e2e needs vLLM and one
    process."""
    if not config.getoption("e2e", False):
        return ()
    if importlib.util.find_spec("vllm") is None:
        raise pytest.UsageError("--e2e runs vLLM's engine, which is not installed here: tpargmax install-vllm")
    if config.getoption("numprocesses", None):
        raise pytest.UsageError("--e2e starts engines of several GiB each: run it in one process, without -n")
    chosen = {}
    for option, known in (("e2e_methods", METHODS), ("e2e_dtypes", DTYPES)):
        chosen[option] = [v.strip() for v in config.getoption(option).split(",") if v.strip()]
        unknown = sorted(set(chosen[option]) - set(known))
        if unknown or not chosen[option]:
            raise pytest.UsageError(f"--{option.replace('_', '-')}: choose from {', '.join(known)}, got {unknown}")
    return tuple((d, m) for d in DTYPES if d in chosen["e2e_dtypes"] for m in METHODS if m in chosen["e2e_methods"])


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    """The engine end to end is opt-in: without --e2e its modules are not even imported."""
    if not config.getoption("e2e") and is_e2e_module(collection_path):
        return True
    return None


@pytest.fixture(scope="session")
def engine_pool(request):
    """vLLM's engines of this run (--e2e): each started once, a group at a time; none outlives the run."""
    pool = request.config.stash[ENGINES] = EnginePool()
    try:
        yield pool
    finally:
        pool.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    chosen = run_settings.current().e2e_groups
    if "engine_spec" in metafunc.fixturenames:  # a speculative engine of each --e2e group
        specs = [EngineSpec(d, m, tp, on) for d, m in chosen for tp in (1, 2) for on in (True, False)]
        metafunc.parametrize("engine_spec", specs, ids=[s.name for s in specs])
    if "e2e_group" in metafunc.fixturenames:
        metafunc.parametrize("e2e_group", chosen, ids=[f"{m}-{d}" for d, m in chosen])


def rank(item: pytest.Item, chosen: tuple[tuple[str, str], ...]) -> int:
    """Where an item's engines come in the run: the index of its (dtype, method) group; -1 without engines.  The
    project's own end-to-end tests name theirs in a ``given`` parameter, as the property's arguments."""
    params = getattr(item, "callspec", None) and item.callspec.params or {}
    given = params.get("given")
    params = {**params, **given} if isinstance(given, dict) else params
    spec = params.get("engine_spec")
    group = (spec.dtype, spec.method) if spec is not None else params.get("e2e_group")
    return chosen.index(group) if group in chosen else -1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The engines of a group are started together and closed when the next is asked for: the group's tests run
    together (a stable sort, so the rest keep their order).  Without --e2e, an end-to-end module named on the command
    line is still collected: its tests say what they need instead of starting engines."""
    chosen = run_settings.current().e2e_groups
    if chosen:
        items[:] = sorted(items, key=lambda item: rank(item, chosen))
        return
    for item in items:
        if is_e2e_module(item.path):
            item.add_marker(pytest.mark.skip(reason=NEEDS_E2E), append=False)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """How often each of vLLM's engines started: once each, if the run kept its groups together."""
    pool = config.stash.get(ENGINES, None)
    if pool is not None and pool.starts:
        again = sorted(spec.name for spec, n in pool.starts.items() if n > 1)
        terminalreporter.section("vLLM's engines")
        terminalreporter.write_line(
            f"{len(pool.starts)} engines started, "
            + (f"these more than once: {', '.join(again)}" if again else "each once")
        )
