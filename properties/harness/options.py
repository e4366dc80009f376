"""The run's pytest options (registered from the root conftest): which implementations are under test, where the
ranks run, the budget, the outputs.  ``--impl SPEC[,SPEC...]`` (or ``TPARGMAX_IMPL``) selects them: built-in short
names or ``MODULE:ATTR``; without it both local paths are tested."""

from __future__ import annotations

import os

import pytest

from groups.devices import DEVICE_ENV, DEVICES, default_device
from properties.harness import settings as run_settings
from sharded.impls import IMPL_ENV, SAMPLING_IMPL_ENV, TOPK_IMPL_ENV
from sharded.local_argmax import BUILTINS, DEFAULT_IMPLS
from sharded.local_sampling import DEFAULT_SAMPLING_IMPLS, SAMPLING_BUILTINS
from sharded.local_top_k import DEFAULT_TOPK_IMPLS, TOPK_BUILTINS


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tpargmax")
    for flag, env, builtins, default, what in (
        ("--impl", IMPL_ENV, BUILTINS, DEFAULT_IMPLS, "implementation(s)"),
        ("--topk-impl", TOPK_IMPL_ENV, TOPK_BUILTINS, DEFAULT_TOPK_IMPLS, "top-k implementation(s)"),
        ("--sampling-impl", SAMPLING_IMPL_ENV, SAMPLING_BUILTINS, DEFAULT_SAMPLING_IMPLS, "sampler(s)"),
    ):
        group.addoption(
            flag,
            default=os.environ.get(env),
            help=f"{what} under test, comma-separated: {sorted(builtins)} or MODULE:ATTR "
            f"(default: {','.join(default)}; env {env})",
        )
    group.addoption(
        "--heads",
        default=os.environ.get("TPARGMAX_HEADS", "all"),
        choices=run_settings.HEADS,
        help="which heads the cases draw: all (default), or base: only base ids are tokens, for implementations "
        "without added vocabulary (added rows still appear, beyond the logits vocabulary; env TPARGMAX_HEADS)",
    )
    group.addoption(
        "--layouts",
        default=os.environ.get("TPARGMAX_LAYOUTS", ",".join(run_settings.LAYOUTS)),
        help="the layouts beyond one even split that the implementations take, comma-separated, or none: diverged "
        "(the ranks' copies of the hidden states differ), dp (attention data parallel's row segments), uneven "
        "(shards of unequal width); the others' properties skip (default: all; env TPARGMAX_LAYOUTS)",
    )
    group.addoption(
        "--xfails-file",
        default=os.environ.get("TPARGMAX_XFAILS"),
        help="known failures of your implementation: lines of 'TEST-ID-SUBSTRING  # reason' (env TPARGMAX_XFAILS)",
    )
    group.addoption(
        "--backend",
        default=None,
        help="comma-separated backends the properties run on: sim (threads), gloo (process pool) "
        "(default sim,gloo; sim with --device cuda)",
    )
    group.addoption(
        "--device",
        default=default_device(),
        help=f"where every rank's tensors and the oracle live: {' or '.join(DEVICES)}; rank r takes cuda:(r mod N) "
        f"with N GPUs (default %(default)s; env {DEVICE_ENV})",
    )
    group.addoption(
        "--gloo-tps",
        default=None,
        help="tp sizes of the gloo pools (default 2,4; 2,4,8 under the nightly profile)",
    )
    group.addoption(
        "--repro-dir",
        default=os.environ.get("TPARGMAX_REPRO_DIR", "repro"),
        help="where each failure is also written as a standalone repro file, and where committed repro files "
        "are replayed from as regression tests (default %(default)s; env TPARGMAX_REPRO_DIR)",
    )
    group.addoption(
        "--results-json",
        default=None,
        help="write every test's outcome (rule, case, replay, repro file of each failure) to this JSON file",
    )
    group.addoption(
        "--only-subjects",
        action="store_true",
        help="run only the tests that call an implementation under test (--impl, --topk-impl, --sampling-impl)",
    )
    group.addoption(
        "--fuzz-seed",
        type=int,
        default=None,
        help="seed the run's Hypothesis tests, keeping the example database on (tpargmax fuzz records it)",
    )
    group.addoption(
        "--shard-tests",
        default=None,
        metavar="I/N",
        help="run share I of N of the selected tests (by test id; tpargmax fuzz --shard I/N --shard-by properties)",
    )
    group.addoption(
        "--max-examples",
        type=int,
        default=None,
        help="override the profile's examples per property (used by tpargmax fuzz for time-boxed rounds)",
    )
    group.addoption(
        "--collective-timeout",
        type=float,
        default=run_settings.Settings.collective_timeout,
        help="seconds a rank may go without answering (gloo) or without reaching a collective (sim) before "
        "it is reported as hung (default %(default)s)",
    )
