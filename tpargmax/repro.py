"""``tpargmax repro FILE``: replay a repro file deterministically and explain what happened.

Exit 0: every file's property holds now; 1: some file still fails; 2: some file could not be replayed
(damaged, its implementation cannot be loaded, it names one the project does not ship and the user did not
vouch for, or what it needs is not here: the environment it was recorded in, an engine, a device, a communicator),
each named in one line on stderr.  A file that cannot run here is never judged: a pass on other code is not a
fix.  The recorded implementation is imported only if it is a built-in (``sharded.impls.shipped``), or with
``--impl`` or ``--trust-recorded-impl``: a file that arrives with a module beside it must not run that module
because it was replayed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from groups.devices import check_backend
from properties.argmax.diagnosis import explain_tokens
from properties.cases.plans import SamplePlan
from properties.failures import ImplementationHung, PropertyFailure
from properties.harness.settings import changed
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
    for path in files:
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
            unreadable += 1
            continue
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
            failed += 1
        else:
            print("  fixed: the property holds")
    return 2 if unreadable else 1 if failed else 0


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
