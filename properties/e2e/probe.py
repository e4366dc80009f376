"""What the probe recorded in an engine's workers, read back as the suite's cases.

Each call of the draft's head becomes an :class:`~properties.cases.case.Inputs`: the hidden states the engine
handed it, the head's rows as every rank held them (padding included), its ``d2t``, scale and soft cap, laid out by
the suite's own model of vLLM's vocab-parallel head, which is checked against what the workers reported.  Each
proposal is keyed by the request and the number of tokens it had (:func:`proposals`), which does not depend on how
the engine batched its steps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engines.vllm.e2e.engine import Generated
from engines.vllm.e2e.scenario import HETERO
from properties.argmax.faults import CPU_ENGINE
from properties.cases.case import Case, Inputs, layouts_of


class ProbeMismatch(RuntimeError):
    """What the workers recorded cannot be read as the suite's case: a harness problem, never a verdict."""


@dataclass(frozen=True)
class Call:
    """One call of the draft's head: proposal ``step``, draft position ``position``, a row per request."""

    step: int
    position: int
    prompts: tuple[int, ...]  # the prompt of each row
    hidden: torch.Tensor  # [B, H] as rank 0 saw it
    tokens: tuple[torch.Tensor | None, ...]  # what each rank's greedy sampling returned (None: it raised)
    drafted: torch.Tensor | None  # the proposal's column for this position (rank 0); None where it raised
    head: tuple[torch.Tensor | None, ...]  # each rank's local path's ids, before d2t (None: switch off)
    model: tuple[torch.Tensor | None, ...] = ()  # each rank's model's get_top_tokens, after d2t (None: not called)


@dataclass
class Rank:
    meta: dict[str, Any]
    tensors: dict[str, torch.Tensor]


class Drafting:
    """Everything an engine's run recorded, for the checks."""

    def __init__(self, run: Generated) -> None:
        if run.records is None:
            raise ProbeMismatch(f"{run.spec.name} ran without the probe's records")
        self.run = run
        self.ranks = [_read(path) for path in run.records]
        self.head = self.ranks[0].meta["head"]
        self.verified: list[dict[str, list[int]]] = self.ranks[0].meta["verified"]
        self.d2t = self.ranks[0].tensors.get("d2t")
        self.own_words = run.spec.method == HETERO  # a draft with a vocabulary of its own: its picks mapped

    @cached_property
    def died(self) -> str | None:
        """What the proposal that ended the engine raised, as the first rank to record it said; None if none did."""
        return next((step["died"] for rank in self.ranks for step in rank.meta["steps"] if "died" in step), None)

    @cached_property
    def request_ids(self) -> list[str]:
        """The requests by prompt: the ids the engine answered with, or, in a run that died before it answered, the
        ones the probe saw in the order vLLM numbers one generate's requests (``"<n>"`` or ``"<n>-<suffix>"``)."""
        return self.run.request_ids or sorted(
            {r.partition("-")[0] for rank in self.ranks for step in rank.meta["steps"] for r in step["req_ids"]},
            key=lambda r: int(r) if r.isdigit() else -1,
        )

    def prompt_of(self, request_id: str) -> int:
        """The prompt a request served (:attr:`request_ids`)."""
        known = self.request_ids
        for i, rid in enumerate(known):
            if request_id == rid or request_id.startswith(f"{rid}-"):
                return i
        raise ProbeMismatch(f"the probe saw request {request_id!r}, which is none of {known}")

    @cached_property
    def calls(self) -> list[Call]:
        out = []
        for step in self.ranks[0].meta["steps"]:
            s, prompts = step["step"], tuple(self.prompt_of(r) for r in step["req_ids"])
            drafts = self.ranks[0].tensors.get(f"step{s}.drafts")
            for c in range(step["calls"]):
                hidden = self.ranks[0].tensors[f"step{s}.call{c}.hidden"]
                tokens, head, model = (
                    tuple(rank.tensors.get(f"step{s}.call{c}.{k}") for rank in self.ranks)
                    for k in ("tokens", "head", "model")
                )
                drafted = None if drafts is None else drafts[:, c]
                out.append(Call(s, c, prompts, hidden, tokens, drafted, head, model))
        return out

    @cached_property
    def placeholders(self) -> int:
        """Draft tokens the target verified that no proposal filled (``-1``: a new request's first step)."""
        return sum(t == -1 for step in self.verified for tokens in step.values() for t in tokens)

    @cached_property
    def case(self) -> Case:
        """The draft's head as the suite's case (its sizes, dtype, scale and d2t; not its tensors)."""
        info, logits_vocab = self.head, self.head["logits_vocab"]
        return Case(
            batch=1,
            hidden=self.ranks[0].tensors["head"].shape[1],
            vocab=info["org_vocab"],
            tp=info["tp"],
            padding_size=64,
            logits_vocab=None if logits_vocab == info["org_vocab"] else logits_vocab,
            dtype=info["dtype"],
            weights="normal",
            scale=info["scale"],
            soft_cap=info["soft_cap"],
            d2t="none" if self.d2t is None else "eagle3",
            target_extra=0 if self.d2t is None else info["target_vocab"] - info["org_vocab"],
        )

    def inputs(self, call: Call) -> Inputs:
        """The call as the suite's case: the oracle's and the diagnosis' input."""
        if len(self.ranks) != self.head["tp"]:
            raise ProbeMismatch(f"{self.run.spec.name}: {len(self.ranks)} of {self.head['tp']} ranks wrote records")
        info, shards = self.head, [rank.tensors["head"] for rank in self.ranks]
        case = replace(self.case, batch=call.hidden.shape[0])
        layouts = layouts_of(case)
        for lay, rank in zip(layouts, self.ranks, strict=True):
            got = rank.meta["head"]
            if (got["start"], got["rows_per_rank"]) != (lay.start, lay.size):
                raise ProbeMismatch(
                    f"rank {lay.rank} of {self.run.spec.name} holds rows from id {got['start']}, "
                    f"{got['rows_per_rank']} of them; the suite's layout says {lay.start} and {lay.size}"
                )
        for lay, shard in zip(layouts, shards, strict=True):
            if bool(shard[lay.base_real :].ne(0).any()):
                raise ProbeMismatch(f"rank {lay.rank}'s padding rows are not zero: the suite's case cannot hold them")
        weight = torch.cat([shard[: lay.base_real] for lay, shard in zip(layouts, shards, strict=True)])
        return Inputs(
            case=case,
            hidden=call.hidden,
            weight=weight,
            bias=None,
            layouts=layouts,
            d2t=self.d2t,
            target_vocab=info["target_vocab"],
            applied=(CPU_ENGINE,),
        )


def _read(path: Path) -> Rank:
    with safe_open(str(path), "pt") as f:
        meta = json.loads((f.metadata() or {}).get("probe", "{}"))
        return Rank(meta, {k: f.get_tensor(k) for k in f.keys()})


@dataclass(frozen=True)
class Proposal:
    """One proposal for one request: its step, its row in that step, the draft tokens sent to the target."""

    step: int
    row: int
    drafts: tuple[int, ...]


def proposals(drafting: Drafting) -> dict[tuple[int, int], Proposal]:
    """Every proposal that went to the target, by (prompt, tokens it had then): the same whatever the batching.

    A request's first proposal follows its first token; each later one follows the verification of the one
    before, which accepted the drafts matching the target's tokens (greedy) and added one of its own."""
    run, out, had = drafting.run, {}, {}
    for call in drafting.calls:
        if call.position:
            continue
        for row, prompt in enumerate(call.prompts):
            n = had.get(prompt, 1)
            if n >= run.scenario.max_tokens:
                continue
            drafts = tuple(drafting.ranks[0].tensors[f"step{call.step}.drafts"][row].tolist())
            out[(prompt, n)] = Proposal(call.step, row, drafts)
            want = run.outputs[prompt][n : n + len(drafts)]
            accepted = next((i for i, (d, w) in enumerate(zip(drafts, want, strict=False)) if d != w), len(want))
            had[prompt] = n + accepted + 1
    return out
