"""A draft with a vocabulary of its own (``use_heterogeneous_vocab``): the oracle's token and the rule a wrong one
broke.

vLLM's contract (``vllm/v1/spec_decode/vocab_mapping.py``): constrain the draft's logits to the words the target
also holds, take the argmax, map it to the target's id.  The oracle reads the shared words from the tokenizers the
suite wrote (:mod:`engines.vllm.e2e.vocabularies`), never from the engine's mapping.  A wrong token is named by
the step it skipped, where the evidence shows one; otherwise by the argmax diagnosis of the draft's own ids.
"""

from __future__ import annotations

import torch

from engines.vllm.e2e import vocabularies
from properties.argmax.diagnosis import explain
from properties.oracle import Answer
from reference.oracle import tokens_over_shared_words

MAPPING_SKIPPED = "vocabulary mapping skipped"
CONSTRAINT_SKIPPED = "draft word the target lacks picked"
NOT_SHARED_ARGMAX = "draft token is not the argmax over the shared words"


def oracle_tokens(want: Answer) -> torch.Tensor:
    """The oracle's draft tokens, target ids, for the call ``want`` answers."""
    return tokens_over_shared_words(want.draft_logits, vocabularies.draft_to_target(), vocabularies.target_unk())


def explain_own_words(want: Answer, row: int, got: int, expected: int) -> tuple[str, list[str]]:
    """The rule a wrong draft token ``got`` (a target id) on ``row`` broke, where the oracle says ``expected``
    (:func:`oracle_tokens`), and the lines that show it."""
    mapping, unk = vocabularies.draft_to_target(), vocabularies.target_unk()
    logits = want.draft_logits[row]
    shared = mapping >= 0
    first = int(torch.argmax(logits))  # over every draft word, as a path that skips the constraint takes it
    best = int(torch.argmax(logits.masked_fill(~shared.to(logits.device), float("-inf"))))
    lines = [
        f"row {row}: expected target {expected}: draft id {best}, the argmax over the {int(shared.sum())} shared "
        f"words of {len(mapping)}",
        f"row {row}: got {got}",
    ]
    if got in (first, best) and got != expected:
        what = "a word the target lacks" if mapping[got] < 0 else f"the word of target {int(mapping[got])}"
        constrained = "" if got == best else ", picked over every draft word (the constraint skipped too)"
        return f"{MAPPING_SKIPPED}: returned draft id {got} ({what}) as a target id{constrained}", lines
    if got == unk and not bool(shared[first]):
        lines.append(f"row {row}: draft id {first}, the argmax over every word, is the draft's own: mapped, [UNK]")
        return f"{CONSTRAINT_SKIPPED}: draft id {first} won and went to the target's [UNK] ({unk})", lines
    back = (mapping == got).nonzero().flatten()
    if len(back) and bool(shared[first]):  # the same pick with or without the constraint: the argmax went wrong
        rule, more = explain(want, row, int(back[0]))
        return rule, [*lines, f"row {row}: target {got} is draft id {int(back[0])}; in the draft's ids:", *more]
    return NOT_SHARED_ARGMAX, lines
