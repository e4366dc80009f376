"""``tpargmax repro FILE``: replay a repro file deterministically and explain what happened."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from properties import repro, runner
from properties.cases import Inputs
from properties.diagnose import ImplementationHung, PropertyFailure, draft_targets
from sharded.impls import load_impl


def _around(logits: torch.Tensor, draft_id: int, width: int = 2) -> str:
    lo, hi = max(0, draft_id - width), min(logits.numel(), draft_id + width + 1)
    return ", ".join(f"{'*' if k == draft_id else ''}{k}: {float(logits[k])!r}" for k in range(lo, hi))


def explain_tokens(impl, inputs: Inputs) -> list[str]:
    """Both tokens on the first row where they differ, the logits around each, and the rank that won."""
    expected = runner.oracle_tokens(inputs)
    try:
        outputs, _ = runner.run_ranks(impl, inputs)
    except Exception as exc:  # noqa: BLE001 - shown, then judged by the property check
        return [f"the implementation raised {type(exc).__name__}: {exc}"]
    got = outputs[0] if isinstance(outputs[0], torch.Tensor) else None
    if got is None or got.shape != expected.shape:
        return [f"the implementation returned {outputs[0]!r}"]
    differ = (got != expected).nonzero().flatten()
    row = int(differ[0]) if differ.numel() else 0
    logits = runner.oracle_draft_logits(inputs)[row].float()
    targets = draft_targets(inputs)
    size = inputs.layouts[0].size
    lines = [
        f"row {row} of {inputs.case.batch}: oracle token {int(expected[row])}, implementation token {int(got[row])}"
    ]
    for who, token in (("oracle", int(expected[row])), ("implementation", int(got[row]))):
        hits = (targets == token).nonzero().flatten()
        if hits.numel():
            k = int(hits[0])
            lines.append(f"  {who}'s draft id {k} (rank {k // size} won): logits {_around(logits, k)}")
        else:
            lines.append(f"  {who}'s token {token} is no draft id's target (padding or out of range)")
    return lines


def replay(args: argparse.Namespace) -> int:
    runner.collective_timeout = args.collective_timeout
    files = [f for p in args.files for f in (sorted(Path(p).glob("*.json")) if Path(p).is_dir() else [Path(p)])]
    if not files:
        print("tpargmax repro: no repro files given or found")
        return 2
    failed = 0
    for path in files:
        try:
            record, inputs = repro.load(path, backend=args.backend)
            impl = load_impl(args.impl or record["impl"])
        except (OSError, ValueError, KeyError) as exc:
            print(f"{path}: cannot replay: {exc}")
            failed += 1
            continue
        print(
            f"{path}: {record['property']}\n  implementation {impl} on {inputs.backend}, tp={inputs.tp}; "
            f"recorded rule: {record['rule']}\n  case: {record['case']}"
        )
        for line in explain_tokens(impl, inputs):
            print(f"  {line}")
        try:
            repro.check(record, impl, inputs)
        except (PropertyFailure, ImplementationHung) as exc:
            print("  STILL FAILING: " + str(exc).splitlines()[0])
            failed += 1
        else:
            print("  fixed: the property holds")
    return 1 if failed else 0
