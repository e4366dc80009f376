"""Replay one case without Hypothesis: ``python -m properties.replay --impl SPEC "Case(...)"``.

Prints the oracle's and the implementation's tokens, the logits around both
and, on a mismatch, the rule broken.  Exits 1 while the bug is present and 0 once it is fixed;
2, with one line on stderr, for a case string or an option it cannot use, or an implementation that needs what
this machine lacks (an engine, a device, a communicator: ``Impl.why_unavailable``).  The case string is
parsed as data (:mod:`properties.cases.text`), so a pasted one never runs code; ``--impl`` imports
the module it names, by design.
"""

from __future__ import annotations

from sharded import quiet_numpy_notice

if __name__ == "__main__":  # a command line: hide torch's NumPy notice before torch is imported below
    quiet_numpy_notice()

import argparse
import os
import sys

from groups.devices import DEVICE_ENV, DEVICES, check_backend, check_device, default_device
from groups.simulated import DEFAULT_TIMEOUT
from properties.argmax.checks import TOKEN_EXACT
from properties.argmax.diagnosis import explain_tokens
from properties.argmax.top_k import TOP_K_EXACT, check_top_k_contract
from properties.cases.plans import parse_plan
from properties.cases.text import parse_case
from properties.failures import ImplementationHung, PropertyFailure
from properties.harness import runner
from properties.harness.settings import changed, configure, pinned_head
from properties.oracle import answer
from properties.repro.records import check
from properties.sampling.checks import noise_of, oracle_sample, plan_for
from properties.sampling.exactness import check_kept_set, check_sample_exact
from properties.sampling.log_probs import check_log_probs
from properties.sampling.params import params_of
from sharded.impls import IMPL_ENV, load_impl, runnable

TOKEN_RECORD = {"property": TOKEN_EXACT}  # replays the output contract and token equality


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m properties.replay", description=__doc__.splitlines()[0])
    parser.add_argument("case", help="the Case(...) repr from a failure message")
    parser.add_argument(
        "--impl", default=None, help=f"built-in name or MODULE:ATTR (default: ${IMPL_ENV} or vllm_pairs)"
    )
    parser.add_argument("--k", type=int, default=None, help="replay a top-k implementation's top k instead")
    parser.add_argument(
        "--sampling",
        default=None,
        metavar="PLAN",
        help="replay a sampler (--impl) with this SamplePlan(...) from a failure message instead",
    )
    parser.add_argument(
        "--backend", choices=("sim", "gloo"), help="where the ranks run (default: sim, or gloo for an engine)"
    )
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default=default_device(),
        help=f"where the tensors live (default: ${DEVICE_ENV} or cpu)",
    )
    parser.add_argument("--collective-timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds")
    args = parser.parse_args(argv)
    with changed(collective_timeout=args.collective_timeout):  # this replay's settings, the caller's after
        return _replay(parser, args)


def _replay(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        device = configure(device=check_device(args.device)).device
        case = parse_case(args.case)
        impl = runnable(load_impl(args.impl or os.environ.get(IMPL_ENV) or "vllm_pairs"))
        configure(pinned=pinned_head([impl]))  # a model class's fixed head, as the suite ran it
        backend = args.backend or ("gloo" if impl.process_bound and device == "cpu" else "sim")
        check_backend([backend], device)
        inputs = runner.prepare(case, backend)
        if args.k is not None and not 1 <= args.k <= inputs.vocab:
            raise ValueError(f"--k must be from 1 to the case's {inputs.vocab} token ids, got {args.k}")
        plan = None if args.sampling is None else plan_for(impl, parse_plan(args.sampling))
        if plan is not None and args.k is not None:
            raise ValueError("--k and --sampling replay different implementations: give one")
    except ValueError as exc:  # one line, nothing run: the case string, --impl or --k cannot be used
        print(f"{parser.prog}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(f"implementation: {impl} on {backend} ({device}), tp={inputs.tp}\ncase: {inputs.case!r}")
    if plan is not None:
        return replay_sampling(impl, inputs, plan)
    if args.k is None:
        for line in explain_tokens(impl, inputs):
            print(line)
    else:
        print(f"k={args.k}; the classic top k of row 0: {answer(inputs).top_k(args.k)[0][0].tolist()}")
    record = TOKEN_RECORD if args.k is None else {"property": TOP_K_EXACT, "extra": {"k": args.k}}
    try:
        if args.k is not None:
            check_top_k_contract(impl, inputs, args.k)
        check(record, impl, inputs)
    except (PropertyFailure, ImplementationHung) as exc:
        print(f"FAILED {exc}")
        return 1
    print("ok: token-exact with the classic path" if args.k is None else "ok: the classic top k, bit for bit")
    return 0


def replay_sampling(impl, inputs, plan) -> int:
    """Tokens, kept set and log-probabilities of one sampler case; exit 1 on the first property that fails."""
    params = params_of(inputs, plan)
    print(f"sampling: {plan!r}\n{params}")
    print(f"the classic sampler's tokens: {oracle_sample(inputs, params, noise_of(impl)).tokens.tolist()}")
    try:
        for check in (check_sample_exact, check_kept_set, check_log_probs):
            check(impl, inputs, plan)
    except (PropertyFailure, ImplementationHung) as exc:
        print(f"FAILED {exc}")
        return 1
    print("ok: the classic sampler's tokens, kept set and log-probabilities")
    return 0


if __name__ == "__main__":
    sys.exit(main())
