"""``tpargmax repro FILE``: replay a repro file deterministically and explain what happened.

An engine's end-to-end record (``properties.repro.e2e_records``) starts its engines again and reruns its scenario.
Exit 0: every file's property holds now; 1: some file still fails; 2: some file could not be replayed
(damaged, its implementation cannot be loaded, it names one the project does not ship and the user did not
vouch for, or what it needs is not here: the environment it was recorded in, an engine, a device, a communicator,
the build of the engine it failed on: a pass on vLLM's CUDA wheel of a failure of its CPU build), each named in one
line on stderr.  A file that cannot run here is never judged: a pass on other code is not a
fix.  The recorded implementation is imported only if it is a built-in (``sharded.impls.shipped``), or with
``--impl`` or ``--trust-recorded-impl``: a file that arrives with a module beside it must not run that module
because it was replayed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from engines.versions import VLLM_VERSION
from engines.vllm.e2e.engine import EngineFailed
from engines.vllm.e2e.pool import EnginePool
from groups.devices import check_backend
from properties.argmax.diagnosis import explain_tokens
from properties.cases.plans import SamplePlan
from properties.failures import ImplementationHung, PropertyFailure
from properties.harness.settings import changed
from properties.repro import e2e_records
from properties.repro import records as repro
from sharded.impls import load_impl, runnable, shipped


def replay(args: argparse.Namespace) -> int:
    with changed(collective_timeout=args.collective_timeout):  # these replays' settings, the caller's after
        return _replay(args)


def _replay(args: argparse.Namespace) -> int:
    files = [f for p in args.files for f in (sorted(Path(p).glob("*.json")) if Path(p).is_dir() else [Path(p)])]
    if not files:
        print("tpargmax repro: no repro files given or found", file=sys.stderr)
        return 2
    failed = unreadable = 0
    engines = None  # vLLM's engines, started for the first end-to-end record and kept for the next
    try:
        for path in files:
            if e2e_records.is_e2e(path):
                engines = engines or EnginePool()
                verdict = _replay_e2e(path, args, engines)
            else:
                verdict = _replay_layer(path, args)
            failed, unreadable = failed + (verdict == 1), unreadable + (verdict == 2)
    finally:
        if engines is not None:
            engines.close()
    return 2 if unreadable else 1 if failed else 0


def _replay_e2e(path: Path, args: argparse.Namespace, engines: EnginePool) -> int:
    """One end-to-end record: its engines started (or reused), its scenario run, its property judged again."""
    try:
        record, scenario, specs, plant = e2e_records.read(path)
        if args.impl or args.backend or args.device:
            raise ValueError(
                "an engine's end-to-end record replays on its own engines: drop --impl, --backend, --device"
            )
        if importlib.util.find_spec("vllm") is None:
            raise ValueError(
                f"it runs vLLM {VLLM_VERSION}'s engine, which is not installed here: tpargmax install-vllm"
            )
    except ValueError as exc:
        print(f"tpargmax repro: {path}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(
        f"{path}: {record['property']}\n  engines: {', '.join(s.name for s in specs)}"
        f"{f'; planted: {plant}' if plant else ''}\n  recorded rule: {record['rule']}\n  scenario: {scenario!r}"
    )
    try:
        e2e_records.check(record["property"], scenario, specs, engines, plant)
    except PropertyFailure as exc:
        print("  STILL FAILING: " + str(exc).splitlines()[0])
        return 1
    except EngineFailed as exc:
        print(f"tpargmax repro: {path}: cannot be judged here: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print("  fixed: the property holds")
    return 0


def _replay_layer(path: Path, args: argparse.Namespace) -> int:
    """One layer record: 0 fixed, 1 still failing, 2 unreadable or not runnable here."""
    try:
        record, inputs = repro.load(path, backend=args.backend, device=args.device)
        check_backend([inputs.backend], inputs.device)
        if not args.trust_recorded_impl:
            refuse_unshipped(record, args.impl)
        refuse_other_environment(record, path)
        impl = runnable(load_impl(args.impl or record["impl"]))
        if "argmax_impl" in record.get("extra", {}):  # a top-1 find is judged against it: it must run here too
            runnable(load_impl(record["extra"]["argmax_impl"]))
    except ValueError as exc:  # a damaged file (a DamagedRepro names it), a device or implementation it lacks
        where = "" if isinstance(exc, repro.DamagedRepro) else f"{path}: "
        print(f"tpargmax repro: {where}{' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(
        f"{path}: {record['property']}\n  implementation {impl} on {inputs.backend} ({inputs.device}), "
        f"tp={inputs.tp}; "
        f"recorded rule: {record['rule']}\n  case: {inputs.case!r}"
    )
    if "k" in record.get("extra", {}):  # a top-k find: the check below names the slot and both ids
        print(f"  k={record['extra']['k']}")
    elif "sampling" in record.get("extra", {}):  # a sampler's find: the check below names the row
        print(f"  sampling: {SamplePlan(**record['extra']['sampling'])!r}")
    elif "distribution" in record.get("extra", {}):
        print(f"  distribution: {record['extra']['distribution']}")
    else:
        for line in explain_tokens(impl, inputs):
            print(f"  {line}")
    try:
        repro.check(record, impl, inputs)
    except (PropertyFailure, ImplementationHung) as exc:
        print("  STILL FAILING: " + str(exc).splitlines()[0])
        return 1
    versions = record.get("versions")
    why = impl.pass_unjudged({k: str(v) for k, v in versions.items()} if isinstance(versions, dict) else {})
    if why:  # it holds on other code than the one that failed: no fix
        print(f"tpargmax repro: {path}: the property holds here, but cannot be judged here: {why}", file=sys.stderr)
        return 2
    print("  fixed: the property holds")
    return 0


def refuse_unshipped(record: dict, impl: str | None) -> None:
    """A ``ValueError`` naming the first implementation the record would have replay import that the project does
    not ship: ``impl`` unless ``--impl`` replaces it, and a top-1 find's ``argmax_impl``."""
    named = [] if impl else [("impl", record["impl"], f"--impl {record['impl']} or ")]
    if "argmax_impl" in record.get("extra", {}):
        named.append(("argmax_impl", record["extra"]["argmax_impl"], ""))
    for field, spec, option in named:
        if not shipped(spec):
            raise ValueError(
                f"its {field} {spec!r} is not one the project ships, and a received file's implementation is not "
                f"imported unasked; to run it on purpose: {option}--trust-recorded-impl"
            )


def refuse_other_environment(record: dict, path: Path) -> None:
    """A ``ValueError`` where the record's ``env`` (the settings its implementation read when it failed) is not this
    process's: the ranks would run other code (vLLM's torch.distributed gather instead of its shared-memory one), so
    a pass would say nothing.  Nothing is set here: the rank processes take the environment the command started in."""
    differ = {k: v for k, v in record.get("env", {}).items() if os.environ.get(k) != v}
    if differ:
        settings = " ".join(f"{k}={v}" for k, v in differ.items())
        raise ValueError(
            f"it was recorded with {settings} in the environment and this replay runs without it, on other code; "
            f"replay it as `{settings} tpargmax repro {path}`"
        )
