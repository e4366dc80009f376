"""vLLM's V1 proposers in the installed wheel (0.32.0, 0.33.0): found by reading it, not listed, and asked what the
switch meets in each.

Every class under ``vllm/v1/spec_decode/`` that derives, directly or through another, from ``SpecDecodeBaseProposer``
is a proposer (:func:`scan`, with ``ast``; the machinery is :func:`engines.vllm.wheel.speculators.scan_classes`).
Each loads its draft through its own ``load_model`` and ``_maybe_share_lm_head`` (the base class refuses a draft class
without ``get_top_tokens`` in the latter) and picks its greedy draft token through its own step methods.  Two
questions, asked on the class itself, with a stand-in instance holding the engine's own objects (a proposer's load
needs a whole engine, which only ``draft_model`` can start on a CPU):

- :func:`refuses`: with the switch on and a draft class without ``get_top_tokens``, does its load refuse, naming the
  class?  Its ``load_model`` bodies are read (:attr:`Speculator.loads`): one that never reaches the base's load
  never runs ``_maybe_share_lm_head``; where it does, that method, as the class resolves it, runs on the stand-in.
- :func:`steps_agree`: for a proposer whose step pick takes the step index (``_sample_draft_tokens_for_step``), is
  the switch's token at step 1 the classic path's?  A draft model of two step heads, whose local path is exact for
  the step it is asked, stands in: only the proposer's routing of the step is judged.
"""

from __future__ import annotations

import inspect
from functools import cache
from types import SimpleNamespace

import torch

from engines.vllm.wheel.discovery import vllm_root
from engines.vllm.wheel.speculators import Speculator, load, scan_classes, stand_in

FOLDER = "v1/spec_decode"
ROOT_CLASS = "SpecDecodeBaseProposer"
BASE = f"vllm.v1.spec_decode.llm_base_proposer:{ROOT_CLASS}"
STEP_PICK = "_sample_draft_tokens_for_step"  # a pick that takes the step index (multi-step MTP drafts)
METHODS = ("_greedy_sample", STEP_PICK, "_maybe_share_lm_head", "load_model")
NOT_REFUSED = "not refused"


@cache
def scan() -> tuple[Speculator, ...]:
    """Every V1 proposer class, sorted by module and name (empty where the wheel has none: 0.34.0 on)."""
    if not (vllm_root() / FOLDER / "llm_base_proposer.py").is_file():
        return ()
    return scan_classes(FOLDER, ROOT_CLASS, METHODS, ("_greedy_sample", STEP_PICK))


def refuses(proposer: Speculator, model_class: type) -> str:
    """What ``proposer``'s load says with the switch on to a draft of ``model_class`` (an uninitialised instance: the
    check reads its class); "not refused: ..." where it lets it through, and why."""
    if BASE not in proposer.loads:
        runs = ", ".join(proposer.loads) or "no load_model"
        return f"{NOT_REFUSED}: {proposer.name}'s load ({runs}) never reaches {ROOT_CLASS}.load_model"
    cls = load(proposer)
    drafter = stand_in(cls)
    drafter.model = model_class.__new__(model_class)
    drafter.use_local_argmax_reduction = True
    drafter.vllm_config = SimpleNamespace(speculative_config=None)
    try:
        cls._maybe_share_lm_head(drafter, SimpleNamespace(model=SimpleNamespace()))
    except ValueError as exc:
        return str(exc)
    owner = proposer.owner("_maybe_share_lm_head")
    lets = f"{owner}._maybe_share_lm_head, which lets {model_class.__name__} through"
    return f"{NOT_REFUSED}: {proposer.name}'s load runs {lets}"


def is_refusal(message: str, model_class: type) -> bool:
    """Whether ``message`` refuses and names the draft class, as the contract asks."""
    return not message.startswith(NOT_REFUSED) and model_class.__name__ in message


class TwoStepHeads:
    """A multi-step draft stand-in: step ``i`` reads head ``i``; ``get_top_tokens`` is exact for the step it is asked
    (its default, like the classic path's, step 0)."""

    def __init__(self, heads: torch.Tensor) -> None:
        self.heads = heads

    def compute_logits(self, hidden_states: torch.Tensor, spec_step_idx: int = 0) -> torch.Tensor:
        return hidden_states @ self.heads[spec_step_idx].T

    def get_top_tokens(self, hidden_states: torch.Tensor, spec_step_idx: int = 0) -> torch.Tensor:
        return self.compute_logits(hidden_states, spec_step_idx).argmax(dim=-1)


def steps_agree(proposer: Speculator, step: int = 1) -> str | None:
    """Whether the switch picks step ``step``'s token with step ``step``'s head: None where the proposer has no step
    pick; else "agree", or what each branch returned.  The heads differ in every row, so a branch that reads another
    step's head picks another token."""
    owner = proposer.owner(STEP_PICK)
    if owner is None:
        return None
    cls = load(proposer)
    hidden = torch.eye(4)
    heads = torch.stack([torch.eye(4), torch.eye(4).roll(1, dims=0)])  # step 0 picks row i, step 1 row i + 1
    picked = {}
    for switch in (True, False):
        drafter = stand_in(cls)
        drafter.model = TwoStepHeads(heads)
        drafter.use_local_argmax_reduction = switch
        drafter._enable_probabilistic_draft_probs = False
        metadata = SimpleNamespace(all_greedy=True)
        tokens = getattr(cls, STEP_PICK)(drafter, hidden, metadata, spec_step_idx=step)
        picked[switch] = (tokens[0] if isinstance(tokens, tuple) else tokens).tolist()
    if picked[True] == picked[False]:
        return "agree"
    where = inspect.getsourcefile(getattr(cls, STEP_PICK)) or owner
    return (
        f"at step {step}, the switch picked {picked[True]} and the classic path {picked[False]} "
        f"({owner}.{STEP_PICK}, {where.rpartition('/vllm/')[2] or where})"
    )


class _Words:
    """A word-level tokenizer stand-in with what ``VocabMapping`` reads of one (the word of each id)."""

    unk_token_id = eos_token_id = 0

    def __init__(self, words: list[str]) -> None:
        self.words = words

    def get_vocab(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.words)}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.get_vocab().get(w, 0) for w in text.split()]

    def convert_ids_to_tokens(self, i: int) -> str:
        return self.words[i]


def own_words_agree(proposer: Speculator) -> str:
    """With a vocabulary of its own (vLLM's ``VocabMapping`` over two word lists), does the proposer's greedy pick
    with the switch on give the classic branch's token?  The draft's largest logit is a word the target lacks, the
    next a shared word at another id.  "agree", or what each branch returned."""
    from vllm.v1.spec_decode.vocab_mapping import VocabMapping

    target, draft = ["[UNK]", *(f"w{i}" for i in range(1, 8))], ["[UNK]", "w6", "own", "w1"]
    mapping = VocabMapping(_Words(target), _Words(draft), len(target), len(draft), "cpu")
    logits = torch.tensor([[0.0, 2.0, 3.0, 1.0]])  # "own" first, then "w6" (draft 1, target 6)

    class Draft:
        def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
            return logits

        def get_top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
            return logits.argmax(dim=-1)  # exact: one rank

    cls, picked = load(proposer), {}
    for switch in (True, False):
        drafter = stand_in(cls)
        drafter.model, drafter.vocab_mapping = Draft(), mapping
        drafter.use_local_argmax_reduction, drafter.use_heterogeneous_vocab = switch, True
        picked[switch] = cls._greedy_sample(drafter, torch.zeros(1, 1)).tolist()
    if picked[True] == picked[False]:
        return "agree"
    return f"the switch picked {picked[True]} and the classic path {picked[False]} (the shared word w6 is target 6)"
