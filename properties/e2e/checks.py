"""The end-to-end properties: what vLLM's engine drafts and outputs, judged by the oracle and by each other.

Greedy speculative decoding is lossless, so a wrong draft token never shows in the output: it is rejected.  The
properties therefore look inside (the probe's records) and at the engine's acceptance counters.  Both settings of
``use_local_argmax_reduction`` are judged against the oracle: vLLM's classic path is a subject, not the reference.
Every failure names the rule, the engine, the step and the request, and carries what a repro file needs.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from engines.versions import vllm_release
from engines.vllm.e2e.engine import Generated
from properties.argmax.diagnosis import explain, non_token_rule
from properties.e2e.probe import Call, Drafting, ProbeMismatch, Proposal, proposals
from properties.failures import PropertyFailure
from properties.oracle import answer

DRAFT_TARGETS = "every draft token is a target id below the logits vocabulary"
DRAFT_ORACLE = "every draft token is the oracle's on what the engine handed the draft's head"
LOSSLESS = "the tokens equal those without speculation"
SAME_DRAFTS = "the draft tokens are the same with the switch on and off, and at tp 1 and 2"
EXACT_ACCEPTANCE = "with a draft that predicts the target exactly, every draft token is accepted"

RANKS_DIFFER = "the ranks' heads returned different draft tokens"
PROPOSAL_DIFFERS = "the proposal sent the target another token than the draft's head returned"
NO_CALLS = "the probe saw no call of the draft's head although the engine drafted"


def engine_line(run: Generated) -> str:
    spec = run.spec
    switch = f", use_local_argmax_reduction {'on' if spec.switch else 'off'}" if spec.method else ", no speculation"
    head = f"vLLM {vllm_release()}'s engine"
    return f"{head}: {spec.method or 'the target alone'} at tp={spec.tp}{switch}, {spec.dtype}"


def fail(rule: str, prop: str, runs: list[Generated], details: list[str]) -> None:
    """Raise the end-to-end failure: the rule, the engines, the details, the scenario (a repro file replays it)."""
    __tracebackhide__ = True
    scenario, plant = runs[0].scenario, runs[0].plant
    exc = PropertyFailure(
        "\n".join(
            [
                f"[{rule}]",
                f"  property: {prop}",
                *(f"  engine: {engine_line(run)}" for run in runs),
                *(f"  {d}" for d in details),
                *([f"  planted in every worker: {plant} (tests.broken_engine)"] if plant else []),
                f"  scenario: {scenario!r}",
                "  replay: tpargmax repro FILE, with the repro file this failure writes (named in the report)",
            ]
        )
    )
    exc.repro = {
        "kind": "e2e",
        "rule": rule,
        "property": prop,
        "engines": [asdict(run.spec) for run in runs],
        "scenario": scenario.as_fields(),
        "plant": plant,
        "extra": {},
        "env": {},
    }
    raise exc


def _where(call: Call, row: int) -> str:
    return f"step {call.step}, the request of prompt {call.prompts[row]}, draft position {call.position}"


def check_draft_tokens(run: Generated) -> None:
    """Every token the draft's head returned, on every rank, is what the proposal sent, is a target id below the
    logits vocabulary, and is the oracle's token on what the head was handed."""
    __tracebackhide__ = True
    drafting = Drafting(run)
    if not drafting.calls and run.counters["draft_tokens"] > drafting.placeholders:
        raise ProbeMismatch(f"{run.spec.name}: {NO_CALLS} ({run.counters['draft_tokens']} draft tokens counted)")
    for call in drafting.calls:
        for rank, tokens in enumerate(call.tokens[1:], 1):
            if not torch.equal(tokens, call.tokens[0]):
                row = int((tokens != call.tokens[0]).nonzero()[0])
                details = [
                    f"{_where(call, row)}: rank 0 returned {int(call.tokens[0][row])}, rank {rank} {int(tokens[row])}"
                ]
                fail(RANKS_DIFFER, DRAFT_ORACLE, [run], details)
        if not torch.equal(call.drafted, call.tokens[0]):
            row = int((call.drafted != call.tokens[0]).nonzero()[0])
            details = [
                f"{_where(call, row)}: the head returned {int(call.tokens[0][row])}, the proposal "
                f"sent {int(call.drafted[row])}"
            ]
            fail(PROPOSAL_DIFFERS, DRAFT_ORACLE, [run], details)
        inputs = drafting.inputs(call)
        want = answer(inputs)
        for row, got in enumerate(call.drafted.tolist()):
            rule = non_token_rule(inputs, got)
            if rule is not None:
                fail(rule, DRAFT_TARGETS, [run], [f"{_where(call, row)}: drafted {got}"])
        wrong = (call.drafted != want.tokens).nonzero().flatten().tolist()
        if wrong:
            row = wrong[0]
            rule, lines = explain(want, row, int(call.drafted[row]))
            details = [
                f"{_where(call, row)}: drafted {int(call.drafted[row])}, the oracle {int(want.tokens[row])}",
                *lines,
            ]
            fail(rule, DRAFT_ORACLE, [run], details)


def check_lossless(spec_run: Generated, alone: Generated) -> None:
    """The speculative engine's tokens are the target's alone, prompt by prompt."""
    __tracebackhide__ = True
    for prompt, (got, want) in enumerate(zip(spec_run.outputs, alone.outputs, strict=True)):
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
            details = [
                f"prompt {prompt}, token {at}: {got[at] if at < len(got) else 'none'} with speculation, "
                f"{want[at] if at < len(want) else 'none'} without",
                f"with: {got}",
                f"without: {want}",
            ]
            fail("speculative decoding changed the output", LOSSLESS, [spec_run, alone], details)


def check_same_drafts(runs: list[Generated]) -> None:
    """Every proposal is the same in every engine, keyed by request and length; where two differ, the calls the
    oracle disagrees with are named."""
    __tracebackhide__ = True
    draftings = [Drafting(run) for run in runs]
    keyed = [proposals(d) for d in draftings]
    for drafting, other in zip(draftings[1:], keyed[1:], strict=True):
        for key in sorted(set(keyed[0]) & set(other)):
            mine, theirs = keyed[0][key], other[key]
            if mine.drafts != theirs.drafts:
                prompt, n = key
                details = [
                    f"prompt {prompt} after {n} tokens: {runs[0].spec.name} drafted {list(mine.drafts)}, "
                    f"{drafting.run.spec.name} {list(theirs.drafts)}",
                    *_oracle_verdicts([(draftings[0], mine), (drafting, theirs)], prompt),
                ]
                fail("draft tokens differ between engines", SAME_DRAFTS, [runs[0], drafting.run], details)


def _oracle_verdicts(proposed: list[tuple[Drafting, Proposal]], prompt: int) -> list[str]:
    """Where the oracle disagrees with each engine's proposal, call by call."""
    lines = []
    for drafting, proposal in proposed:
        for call in drafting.calls:
            if call.step == proposal.step:
                want, got = int(answer(drafting.inputs(call)).tokens[proposal.row]), int(call.drafted[proposal.row])
                if want != got:
                    lines.append(
                        f"{drafting.run.spec.name}, draft position {call.position}: drafted {got}, the oracle {want}"
                    )
    return lines or [f"the oracle agrees with both at every position of prompt {prompt}: their hidden states differ"]


def check_exact_acceptance(run: Generated) -> None:
    """With a draft that predicts the target exactly, the engine's counters accept every draft token it made.

    vLLM counts as drafted, and rejects, the placeholders it schedules for a request's first step when the prompt
    has one token (``-1``: no proposal filled them); they are not the draft's, so they are left out, and shown."""
    __tracebackhide__ = True
    drafted, accepted = run.counters["draft_tokens"], run.counters["accepted"]
    drafting = Drafting(run)
    if accepted != drafted - drafting.placeholders:
        details = [
            f"vLLM's counters: {accepted} accepted of {drafted} draft tokens, {drafting.placeholders} of them "
            f"placeholders (-1) for one-token prompts; {drafted - drafting.placeholders - accepted} rejected",
            *_first_rejected(drafting),
        ]
        fail("a draft token that predicts the target exactly was rejected", EXACT_ACCEPTANCE, [run], details)


def _first_rejected(drafting: Drafting) -> list[str]:
    """The first proposal the target did not take whole, and where the oracle disagrees with it."""
    outputs = drafting.run.outputs
    for (prompt, n), proposal in sorted(proposals(drafting).items()):
        continued = outputs[prompt][n : n + len(proposal.drafts)]
        if list(proposal.drafts[: len(continued)]) != continued:
            return [
                f"prompt {prompt} after {n} tokens: drafted {list(proposal.drafts)}, the target went on {continued}",
                *_oracle_verdicts([(drafting, proposal)], prompt),
            ]
    return ["every proposal the probe saw matches the target's tokens: the counters disagree with the outputs"]
