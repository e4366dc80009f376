"""The ``tpargmax`` command: ``check-d2t``, ``repro``, ``promote``, ``fuzz``, ``report`` and ``throughput``.

``check-d2t`` exits 0 when ``use_local_argmax_reduction`` is safe for the draft's
d2t table, 1 when it is unsafe or invalid, 2 when the file cannot be read or
lacks the keys.
"""

from __future__ import annotations

import argparse
import json
import sys

import tpargmax  # noqa: F401 - puts the checkout on sys.path
from sharded import quiet_numpy_notice


def check_d2t(args: argparse.Namespace) -> int:
    import torch

    from properties.d2t_findings import check_tie, targets_of
    from reference.d2t import NON_MONOTONE, analyse_d2t
    from sharded.impls import load_impl
    from tpargmax.checkpoint import CheckpointError, find_key, read_tensors

    try:
        tensors = read_tensors(args.path)
        d2t_key = find_key(tensors, "d2t", required=True)
        t2d_key = find_key(tensors, "t2d", required=False)
        d2t, t2d = tensors[d2t_key], None if t2d_key is None else tensors[t2d_key]
        if t2d is not None and t2d.ndim != 1:
            raise CheckpointError(f"{t2d_key!r} must be a 1-D mask over the target vocabulary, got {tuple(t2d.shape)}")
        report = analyse_d2t(d2t, args.target_vocab, t2d)
    except (CheckpointError, ValueError) as exc:  # analyse_d2t names a d2t that is not 1-D integer offsets
        where = "" if isinstance(exc, CheckpointError) else f"{args.path}: "
        print(f"tpargmax check-d2t: {where}{exc}", file=sys.stderr)
        return 2
    finding = None
    if report.kind == NON_MONOTONE:  # confirm by running the local path against the oracle
        i, j = report.first_inversion[:2]
        target_vocab = report.target_vocab or int(targets_of(d2t).max()) + 1
        finding = check_tie(load_impl("vllm_pairs"), d2t.to(torch.int64), target_vocab, i, j)
    verdict = "safe" if report.safe else "NOT safe"
    if args.json:
        print(
            json.dumps(
                {
                    "path": args.path,
                    "d2t_key": d2t_key,
                    "t2d_key": t2d_key,
                    **report.to_json(),
                    "counterexample": None if finding is None else vars(finding),
                },
                indent=2,
            )
        )
    else:
        print(
            f"{args.path}: d2t {d2t_key!r} ({report.draft_vocab} draft ids)"
            + (f", t2d {t2d_key!r} ({t2d.numel()} targets)" if t2d is not None else ", no t2d")
            + (f", target vocabulary {report.target_vocab}" if report.target_vocab is not None else "")
        )
        print(f"classification: {report.kind}")
        print(f"evidence: {report.evidence()}")
        if finding is not None:
            print(f"counterexample (vllm_pairs against the classic path): {finding}")
        print(f"use_local_argmax_reduction: {verdict} for this draft")
    return 0 if report.safe else 1


def _lazy(module: str, name: str):
    import importlib

    return getattr(importlib.import_module(module), name)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpargmax", description="Token-exact checks of TP local argmax.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-d2t", help="classify a draft checkpoint's d2t table")
    check.add_argument("path", help="a .safetensors file or a torch state dict")
    check.add_argument("--target-vocab", type=int, help="target vocabulary size (default: t2d's length, if any)")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(run=check_d2t)

    rep = commands.add_parser("repro", help="replay repro files (or directories of them)")
    rep.add_argument("files", nargs="+", help="repro .json files or directories holding them")
    rep.add_argument("--impl", help="replay against this implementation instead of the recorded one")
    rep.add_argument("--backend", choices=("sim", "gloo"), help="replay on this backend instead of the recorded one")
    rep.add_argument("--collective-timeout", type=float, default=10.0, help="seconds (default %(default)s)")
    rep.set_defaults(run=lambda args: _lazy("tpargmax.replay", "replay")(args))

    pro = commands.add_parser("promote", help="write a patch that pins a repro file's case as an @example")
    pro.add_argument("file", help="a repro .json file")
    pro.add_argument("--out", default=".hypothesis/patches", help="where the patch goes (default %(default)s)")
    pro.set_defaults(run=lambda args: _lazy("tpargmax.promote", "promote")(args))

    fuzz = commands.add_parser("fuzz", help="run the property suite under the nightly profile within a budget")
    fuzz.add_argument("--minutes", type=float, help="time budget")
    fuzz.add_argument("--rounds", type=int, help="number of rounds (with --minutes: whichever ends first)")
    fuzz.add_argument(
        "--examples",
        type=int,
        default=50,
        help="examples per property in a round (default %(default)s; "
        "with --minutes, later rounds are resized to the time left)",
    )
    fuzz.add_argument("--seed", type=int, help="draw every round's seed from this one, to rerun a session exactly")
    fuzz.add_argument("-k", help="only the properties matching this pytest -k expression")
    fuzz.add_argument("--impl", help="implementations under test, comma-separated (default: the built-in local paths)")
    fuzz.add_argument("--backend", default="sim", help="sim, gloo or both, comma-separated (default %(default)s)")
    fuzz.add_argument("-n", "--workers", default="auto", help="pytest-xdist workers (default %(default)s)")
    fuzz.add_argument("--repro-dir", default="repro", help="where failures are written (default %(default)s)")
    fuzz.add_argument("--log", default=".hypothesis/fuzz-log.jsonl", help="seeds and counts per round")
    fuzz.set_defaults(run=lambda args: _lazy("tpargmax.fuzz", "fuzz")(args))

    vllm = commands.add_parser("install-vllm", help="install vLLM 0.32.0 (CPU) into this venv, for the vLLM tests")
    vllm.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    vllm.set_defaults(run=lambda args: _lazy("tpargmax.install_vllm", "install_vllm")(args))

    rpt = commands.add_parser(
        "report",
        help="every implementation (built-ins, engine variants, vLLM's layer and model classes) "
        "against every property: a conformance matrix",
    )
    rpt.add_argument("--out", help="write the Markdown page here, and its JSON beside it (default: print)")
    rpt.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    rpt.add_argument("--render", metavar="JSON", help="render a saved report's JSON as the page; run nothing")
    rpt.add_argument("--rows", nargs="+", help="only the rows whose name contains one of these")
    rpt.add_argument("--examples", type=int, default=120, help="--max-examples per property (default %(default)s)")
    rpt.add_argument("--repro-dir", default="repro/vllm-0.32.0", help="where failures' repro files go")
    rpt.add_argument("--row-timeout", type=float, default=900.0, help="seconds one row may take (default %(default)s)")
    rpt.set_defaults(run=lambda args: _lazy("tpargmax.report", "report")(args))

    speed = commands.add_parser("throughput", help="examples per second of the core properties, per backend")
    speed.add_argument("--impl", default="vllm_pairs", help="implementation to run them on (default %(default)s)")
    speed.add_argument("--backend", default="sim,gloo", help="comma-separated backends (default %(default)s)")
    speed.set_defaults(run=lambda args: _lazy("tpargmax.throughput", "throughput")(args))
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet_numpy_notice()  # every subcommand imports torch lazily, after this
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "fuzz" and args.minutes is None and args.rounds is None:
        parser.error("fuzz: give a budget: --minutes, --rounds or both")
    for name in ("minutes", "rounds", "examples"):
        if args.command == "fuzz" and getattr(args, name) is not None and not getattr(args, name) > 0:
            parser.error(f"fuzz: --{name} must be > 0, got {getattr(args, name)}")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
