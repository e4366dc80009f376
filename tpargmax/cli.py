"""The ``tpargmax`` command: ``check-d2t``, ``repro``, ``promote``, ``fuzz``, ``report``, ``throughput``, ``coverage``.

Each subcommand's module is imported only when it runs, so ``--help`` and
``check-d2t`` stay quick.
"""

from __future__ import annotations

import argparse
import sys
from functools import cache

import tpargmax  # noqa: F401 - puts the checkout on sys.path
from engines.versions import (
    ASCEND_PAGE,
    ASCEND_VERSION,
    SGLANG_PAGE,
    SGLANG_VERSION,
    TPU_INFERENCE_PAGE,
    TPU_INFERENCE_VERSION,
    VLLM_VERSION,
)
from sharded import quiet_numpy_notice


def _lazy(module: str, name: str):
    import importlib

    return getattr(importlib.import_module(module), name)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


@cache  # built once per process: the tests call main() in-process hundreds of times (5 ms a build)
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpargmax", description="Token-exact checks of TP local argmax.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-d2t", help="classify a draft checkpoint's d2t table")
    check.add_argument(
        "path",
        help="a draft directory (config.json with model.safetensors, a shard index or pytorch_model.bin), "
        "a .safetensors or torch file, or a *.index.json",
    )
    check.add_argument(
        "--target-vocab",
        type=_positive,
        help="target vocabulary size (default: config.json's vocab_size, else t2d's length)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(run=lambda args: _lazy("tpargmax.d2t.check", "check_d2t")(args))

    rep = commands.add_parser(
        "repro", help="replay repro files (or directories of them): exit 0 fixed, 1 still failing, 2 unreadable"
    )
    rep.add_argument("files", nargs="+", help="repro .json files or directories holding them")
    rep.add_argument("--impl", help="replay against this implementation instead of the recorded one")
    rep.add_argument(
        "--trust-recorded-impl",
        action="store_true",
        help="import the implementation a file records even if it is not a built-in (by default only built-ins "
        "are imported from a file)",
    )
    rep.add_argument("--backend", choices=("sim", "gloo"), help="replay on this backend instead of the recorded one")
    rep.add_argument("--device", choices=("cpu", "cuda"), help="replay on this device instead of the recorded one")
    rep.add_argument("--collective-timeout", type=float, default=10.0, help="seconds (default %(default)s)")
    rep.set_defaults(run=lambda args: _lazy("tpargmax.repro.replay", "replay")(args))

    pro = commands.add_parser("promote", help="write a patch that pins a repro file's case as an @example")
    pro.add_argument("file", help="a repro .json file")
    pro.add_argument("--out", default=".hypothesis/patches", help="where the patch goes (default %(default)s)")
    pro.set_defaults(run=lambda args: _lazy("tpargmax.repro.promote", "promote")(args))

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
    fuzz.add_argument(
        "--shard", type=_shard, default=(1, 1), metavar="I/N", help="worker I of N: round seeds disjoint from theirs"
    )
    fuzz.add_argument(
        "--shard-by",
        choices=("seeds", "properties"),
        default="seeds",
        help="what --shard splits: the seeds (every worker runs every property; default) or the properties too "
        "(each worker a disjoint 1/N of the tests, so each gets N times the examples in a round)",
    )
    fuzz.add_argument(
        "--db", help="example database: a directory, or redis://HOST:PORT/N shared by a fleet (default $TPARGMAX_DB)"
    )
    fuzz.set_defaults(run=lambda args: _lazy("tpargmax.fuzz.campaign", "fuzz")(args))

    summary = commands.add_parser(
        "fuzz-summary", help="merge fuzz workers' logs and repro files into one summary (Markdown)"
    )
    summary.add_argument("dirs", nargs="+", help="each worker's results: fuzz-log*.jsonl and repro files, any depth")
    summary.add_argument("--repro-out", help="copy every distinct repro file here")
    summary.add_argument("--out", help="write the summary here (default: print)")
    summary.set_defaults(run=lambda args: _lazy("tpargmax.fuzz.summary", "main")(args))

    vllm = commands.add_parser(
        "install-vllm", help=f"install vLLM {VLLM_VERSION} (CPU) into this venv, or any other release into its own"
    )
    vllm.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    vllm.add_argument(
        "--version",
        default=VLLM_VERSION,
        type=lambda v: _lazy("tpargmax.install.vllm", "check_version")(v),
        help=f"the release (default {VLLM_VERSION}, into this venv; any other the registry serves into "
        ".venv-vllm-VERSION)",
    )
    vllm.add_argument(
        "--from",
        dest="source",
        metavar="PATH",
        help="a vLLM checkout, Python only, over the wheel of the release it was tagged from, into .venv-vllm-src",
    )
    vllm.set_defaults(run=lambda args: _lazy("tpargmax.install.vllm", "install_vllm")(args))

    sglang = commands.add_parser(
        "install-sglang",
        help=f"install SGLang {SGLANG_VERSION}'s wheel without dependencies, for its GPU kernels under test",
    )
    sglang.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    sglang.set_defaults(run=lambda args: _lazy("tpargmax.install.sglang", "install_sglang")(args))

    ascend = commands.add_parser(
        "install-ascend",
        help=f"fetch vllm-ascend {ASCEND_VERSION}'s sdist (pinned hash) into .engines/, for its reduce sampling under "
        "test; nothing of it is installed or run",
    )
    ascend.add_argument("--dry-run", action="store_true", help="print what it would do without doing it")
    ascend.add_argument(
        "--from", dest="source", metavar="PATH", help="a vllm-ascend checkout to judge instead of the release"
    )
    ascend.set_defaults(run=lambda args: _lazy("tpargmax.install.ascend", "install_ascend")(args))

    samplers = commands.add_parser(
        "install-samplers",
        help=f"install vLLM {VLLM_VERSION} (CPU), Triton and SGLang {SGLANG_VERSION}'s wheel, for the engines' "
        "samplers under test",
    )
    samplers.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    samplers.set_defaults(run=lambda args: _lazy("tpargmax.install.samplers", "install_samplers")(args))

    tpu = commands.add_parser(
        "install-tpu-inference",
        help=f"install jax 0.10.2 and tpu-inference {TPU_INFERENCE_VERSION}'s wheel without dependencies, for its "
        "sampler under test",
    )
    tpu.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    tpu.set_defaults(run=lambda args: _lazy("tpargmax.install.tpu_inference", "install_tpu_inference")(args))

    e2e = commands.add_parser(
        "e2e",
        help="the installed vLLM's engine end to end: speculative decoding with use_local_argmax_reduction on and "
        "off, at tp 1 and 2 (needs tpargmax install-vllm, a build with vLLM's CPU kernels)",
    )
    e2e.add_argument(
        "--methods",
        help="speculative methods (default eagle3,eagle,draft_model,draft_model_hetero; draft_model_hetero: a draft "
        "with a vocabulary of its own)",
    )
    e2e.add_argument("--dtypes", help="dtypes (default float32,bfloat16)")
    e2e.add_argument(
        "--examples",
        type=_positive,
        help="drawn examples per property and engine (default: 8, ci's), after one pinned per planted case (8)",
    )
    e2e.add_argument(
        "--quick",
        action="store_true",
        help="the quick subset: eagle3 and draft_model_hetero in float32, 2 drawn examples (--methods, --dtypes and "
        "--examples, where given, win)",
    )
    e2e.add_argument("--profile", default="ci", help="Hypothesis profile (default %(default)s; nightly: database on)")
    e2e.add_argument(
        "--repro-dir", help="failures go to its e2e/ folder (default repro/vllm-VERSION, the installed build's)"
    )
    e2e.add_argument("--self-test", action="store_true", help="also show each property failing on a broken local path")
    e2e.add_argument("pytest_args", nargs=argparse.REMAINDER, help="what follows -- goes to pytest as it is")
    e2e.set_defaults(run=lambda args: _lazy("tpargmax.e2e", "e2e")(args))

    rpt = commands.add_parser(
        "report",
        help="every implementation (built-ins, engine variants, vLLM's layer and model classes) "
        "against every property: a conformance matrix",
    )
    rpt.add_argument(
        "--page",
        choices=("vllm", "sampling", "tpu-inference", "sglang", "ascend"),
        default="vllm",
        help="which page: vLLM's argmax and top-k, for the installed vLLM release (default), the engines' samplers "
        f"(docs/conformance/sampling.md), tpu-inference's sampler ({TPU_INFERENCE_PAGE}.md), SGLang's argmax and "
        f"greedy picks ({SGLANG_PAGE}.md), or vllm-ascend's reduce sampling ({ASCEND_PAGE}.md)",
    )
    rpt.add_argument("--out", help="write the Markdown page here, and its JSON beside it (default: print)")
    rpt.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    rpt.add_argument("--render", metavar="JSON", help="render a saved report's JSON as the page; run nothing")
    rpt.add_argument(
        "--rows", nargs="+", help="only the rows whose name contains one of these (=NAME: the row of that name alone)"
    )
    rpt.add_argument(
        "--merge",
        metavar="JSON",
        help="run the selected rows and put them into this saved report (replacing rows of the same name); "
        "with --out, write the page and JSON there",
    )
    rpt.add_argument("--examples", type=int, default=120, help="--max-examples per property (default %(default)s)")
    rpt.add_argument(
        "--repro-dir",
        help="where failures' repro files go (default: repro/vllm-RELEASE for the installed vLLM release, "
        f"{VLLM_VERSION} without one, or repro/sampling)",
    )
    rpt.add_argument("--row-timeout", type=float, default=900.0, help="seconds one row may take (default %(default)s)")
    rpt.set_defaults(run=lambda args: _lazy("tpargmax.report.command", "report")(args))

    speed = commands.add_parser(
        "throughput",
        help="examples per second of every property, per backend; with --compare REV, README's test command at REV "
        "and at HEAD from fresh clones",
    )
    speed.add_argument("--impl", default="vllm_pairs", help="implementation to run them on (default %(default)s)")
    speed.add_argument("--topk-impl", help="top-k implementation(s), as pytest's --topk-impl (default: the built-in)")
    speed.add_argument("--sampling-impl", help="sampler(s), as pytest's --sampling-impl (default: the built-ins)")
    speed.add_argument("--backend", default="sim,gloo", help="comma-separated backends (default %(default)s)")
    speed.add_argument("-k", help="only the properties matching this pytest -k expression")
    speed.add_argument(
        "--compare",
        metavar="REV",
        help="instead: clone REV and HEAD afresh, run each one's README setup, then time each one's README test "
        "command (statistics shown, to count examples), interleaved; print one table row per commit",
    )
    speed.add_argument("--runs", type=_positive, default=1, help="with --compare: runs of each (default %(default)s)")
    speed.add_argument("--repo", help="with --compare: the repository to clone (default: this checkout)")
    speed.set_defaults(run=lambda args: _lazy("tpargmax.throughput.examples", "throughput")(args))

    cov = commands.add_parser("coverage", help="which pairs of case features the ci run's properties draw and check")
    cov.add_argument("--min", type=_positive, default=20, help="examples each valid pair needs (default %(default)s)")
    cov.add_argument("--impl", help="implementation(s) under test, as pytest's --impl (default: the built-ins)")
    cov.add_argument("--backend", default="sim,gloo", help="comma-separated backends (default %(default)s)")
    cov.add_argument("-n", "--workers", default="auto", help="pytest-xdist workers (default %(default)s)")
    cov.add_argument("-k", help="only the properties matching this pytest -k expression")
    cov.add_argument(
        "--max-examples", type=_positive, help="examples per property instead of the ci profile's (a quicker look)"
    )
    cov.add_argument("--json", metavar="FILE", help="also write every feature's and pair's count here")
    cov.set_defaults(run=lambda args: _lazy("tpargmax.coverage", "coverage")(args))
    return parser


def _shard(text: str) -> tuple[int, int]:
    from properties.harness.fuzz_shards import parse_shard

    try:
        return parse_shard(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    quiet_numpy_notice()  # every subcommand imports torch lazily, after this
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "fuzz" and args.minutes is None and args.rounds is None:
        parser.error("fuzz: give a budget: --minutes, --rounds or both")
    for name in ("minutes", "rounds", "examples"):
        if args.command == "fuzz" and getattr(args, name) is not None and not getattr(args, name) > 0:
            parser.error(f"fuzz: --{name} must be > 0, got {getattr(args, name)}")
    if args.command == "throughput" and args.compare is None and (args.runs != 1 or args.repo is not None):
        parser.error("throughput: --runs and --repo go with --compare REV")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
