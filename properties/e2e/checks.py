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
from engines.vllm.e2e.engine import Engine, EngineDied, Generated
from engines.vllm.e2e.scenario import Scenario
from properties.argmax.diagnosis import carried_rule, explain, non_token_rule
from properties.cases.case import Inputs
from properties.e2e import own_words
from properties.e2e.probe import Call, Drafting, ProbeMismatch, Proposal, proposals
from properties.failures import PropertyFailure
from properties.oracle import Answer, answer

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


def head_id_rule(inputs: Inputs, got: int) -> str | None:
    """The rule an id the draft's head returned, before ``d2t``, breaks by where it lies in the head; None for a
    real row.  Padding rows are numbered by position (``start + row``), as the local path numbers them."""
    for lay in inputs.layouts:
        row = got - lay.start
        if lay.base_real <= row < lay.size:
            return f"padding returned: {got} is padding row {row - lay.base_real} of rank {lay.rank}"
        if 0 <= row < lay.base_real:
            return None
    if inputs.d2t is None:
        return f"returned id out of range: {got} is no row of the head"
    rows = sum(lay.size for lay in inputs.layouts)
    return f"id past d2t: {got} is past the head's {rows} rows and d2t's {len(inputs.d2t)} entries"


def _draft_id(inputs: Inputs, token: int) -> int:
    """The draft id whose target is ``token`` (``token`` itself without d2t; -1 for none)."""
    if inputs.d2t is None:
        return token
    hit = (torch.arange(len(inputs.d2t)) + inputs.d2t == token).nonzero().flatten()
    return int(hit[0]) if len(hit) else -1


def generated(engine: Engine, scenario: Scenario, prop: str, target_of: str | None = None) -> Generated:
    """``engine``'s run of ``scenario``; where the engine dies of it, the failure of ``prop`` that what its heads
    returned shows (:func:`check_death`)."""
    __tracebackhide__ = True
    try:
        return engine.run(scenario, target_of=target_of)
    except EngineDied as died:
        check_death(died, prop)
        raise


def check_death(died: EngineDied, prop: str | None = None) -> None:
    """An engine that died in a proposal: every call its probes recorded, up to the one that raised, judged as
    :func:`check_draft_tokens` judges a run (the ids its heads returned before ``d2t`` first, since the call that
    raised has no tokens), under ``prop`` (None: the draft tokens' own).  Returns where they show no rule: the
    death is then the engine's error, which the caller raises."""
    __tracebackhide__ = True
    drafting = Drafting(died.run)
    if len(drafting.ranks) != died.run.spec.tp:  # a rank went down before it could write: no case to judge
        return
    for call in drafting.calls:
        _judge_call(drafting, call, prop, [f"the engine then died: {drafting.died or 'see its log'}"])


def check_draft_tokens(run: Generated) -> None:
    """Every token the draft's head returned, on every rank, is what the proposal sent, is a target id below the
    logits vocabulary, and is the oracle's token on what the head was handed."""
    __tracebackhide__ = True
    drafting = Drafting(run)
    if not drafting.calls and run.counters["draft_tokens"] > drafting.placeholders:
        raise ProbeMismatch(f"{run.spec.name}: {NO_CALLS} ({run.counters['draft_tokens']} draft tokens counted)")
    for call in drafting.calls:
        _judge_call(drafting, call, None, [])


def _judge_call(drafting: Drafting, call: Call, prop: str | None, after: list[str]) -> None:
    """One call of the draft's head: its ranks agree (before and after ``d2t``), its ids before ``d2t`` are real
    rows, the proposal sent what it returned, and that is a target below the logits vocabulary and the oracle's.
    ``after``: lines every failure ends with; ``prop``: the property failing (None: the draft tokens' own)."""
    __tracebackhide__ = True
    run = drafting.run
    for what, per_rank in (
        ("ids before d2t", call.head),
        ("the model's ids", call.model),
        ("draft tokens", call.tokens),
    ):
        first = per_rank[0]
        for rank, ids in enumerate(per_rank[1:], 1):
            if first is not None and ids is not None and not torch.equal(ids, first):
                row = int((ids != first).nonzero()[0])
                details = [
                    f"{_where(call, row)}: {what}: rank 0 returned {int(first[row])}, rank {rank} {int(ids[row])}"
                ]
                fail(RANKS_DIFFER, prop or DRAFT_ORACLE, [run], details + after)
    inputs = drafting.inputs(call)
    want = answer(inputs)
    head, tokens = call.head[0], call.tokens[0]
    if head is not None:
        for row, got in enumerate(head.tolist()):
            rule = head_id_rule(inputs, got)
            if rule is not None:  # a row past the real ones; the oracle's, rounded, says why it came back
                carried = carried_rule(_draft_id(inputs, int(want.tokens[row])), got)
                details = [f"{_where(call, row)}: the draft's head returned {got}", *([rule] if carried else [])]
                fail(carried or rule, prop or DRAFT_TARGETS, [run], details + after)
    if tokens is None and call.model and call.model[0] is not None:  # the model returned, then vLLM raised
        tokens = call.model[0]
    if tokens is None:  # the call that raised: what vLLM would have drafted from what the head returned
        if head is None:
            return
        tokens = head if inputs.d2t is None else head + inputs.d2t[head]
    if call.drafted is not None and not torch.equal(call.drafted, tokens):
        row = int((call.drafted != tokens).nonzero()[0])
        details = [
            f"{_where(call, row)}: the head returned {int(tokens[row])}, the proposal sent {int(call.drafted[row])}"
        ]
        fail(PROPOSAL_DIFFERS, prop or DRAFT_ORACLE, [run], details + after)
    own = drafting.own_words
    for row, got in enumerate(tokens.tolist()):
        rule = non_token_rule(inputs, got) if not own else _target_id_rule(inputs, got)
        if rule is not None:
            fail(rule, prop or DRAFT_TARGETS, [run], [f"{_where(call, row)}: drafted {got}", *after])
    expected = oracle_tokens(drafting, want)
    wrong = (tokens != expected).nonzero().flatten().tolist()
    if wrong:
        row = wrong[0]
        explained = (
            explain(want, row, int(tokens[row]))
            if not own
            else own_words.explain_own_words(want, row, int(tokens[row]), int(expected[row]))
        )
        details = [f"{_where(call, row)}: drafted {int(tokens[row])}, the oracle {int(expected[row])}", *explained[1]]
        fail(explained[0], prop or DRAFT_ORACLE, [run], details + after)


def oracle_tokens(drafting: Drafting, want: Answer) -> torch.Tensor:
    """The oracle's draft tokens for a call: the classic path's, or for a draft with a vocabulary of its own the
    argmax over the shared words, mapped (:mod:`properties.e2e.own_words`)."""
    return own_words.oracle_tokens(want) if drafting.own_words else want.tokens


def _target_id_rule(inputs: Inputs, got: int) -> str | None:
    """A draft with a vocabulary of its own drafts target ids: the rule an id below none of them breaks."""
    return None if 0 <= got < inputs.target_vocab else f"returned id out of range [0, {inputs.target_vocab})"


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
                want = int(oracle_tokens(drafting, answer(drafting.inputs(call)))[proposal.row])
                got = int(call.drafted[proposal.row])
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
