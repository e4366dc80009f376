"""pytest options and fixtures: which implementation is under test, and collective timeouts.

``--impl SPEC`` (or ``TPARGMAX_IMPL``) selects one implementation: a built-in
short name or ``MODULE:ATTR``.  Without it every built-in is tested, each as a
readable test id such as ``test_token_exact[packed_key]``.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import settings
from hypothesis._settings import is_in_ci

import properties.profiles  # noqa: F401 - registers dev, ci and nightly
from properties import runner
from sharded.local_argmax import BUILTINS

# Two xdist workers on two cores: one intra-op thread each keeps them from fighting.
torch.set_num_threads(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tpargmax")
    group.addoption(
        "--impl",
        default=os.environ.get(runner.IMPL_ENV),
        help=f"implementation under test: one of {sorted(BUILTINS)} or MODULE:ATTR "
        f"(default: every built-in; env {runner.IMPL_ENV})",
    )
    group.addoption(
        "--xfails-file",
        default=os.environ.get("TPARGMAX_XFAILS"),
        help="known failures of your implementation: lines of 'TEST-ID-SUBSTRING  # reason' (env TPARGMAX_XFAILS)",
    )
    group.addoption(
        "--collective-timeout",
        type=float,
        default=runner.collective_timeout,
        help="seconds a rank may wait in one collective before the test fails (default %(default)s)",
    )


def pytest_configure(config: pytest.Config) -> None:
    runner.collective_timeout = config.getoption("collective_timeout")
    spec = config.getoption("impl")
    try:
        config.tpargmax_impls = [runner.load_impl(s) for s in ([spec] if spec else sorted(BUILTINS))]
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("hypothesis_profile", None) is None and not is_in_ci():
        settings.load_profile("dev")


def pytest_report_header(config: pytest.Config) -> list[str]:
    spec = config.getoption("impl")
    return [
        f"tpargmax: implementation under test: {spec or 'all built-ins ' + str(sorted(BUILTINS))}; "
        f"hypothesis profile: {settings.get_current_profile_name()}"
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "impl" in metafunc.fixturenames:
        impls = metafunc.config.tpargmax_impls
        metafunc.parametrize("impl", impls, ids=[i.spec for i in impls])


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = config.getoption("xfails_file")
    if not path:
        return
    for pattern, reason in read_xfails(path):
        for item in items:
            if pattern in item.nodeid:
                item.add_marker(pytest.mark.xfail(reason=f"known failure ({path}): {reason}", strict=True))
