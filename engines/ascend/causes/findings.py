"""What vllm-ascend 0.23.0.post1's failures on ``docs/conformance/vllm-ascend-0.23.0.post1.md`` come from.

Every failure on the page is claimed by its key (:func:`engines.findings.failure_key`); ``tests/test_findings.py``
checks that each is claimed once and no claim is stale.  The lines are from the released sdist's files.
"""

from __future__ import annotations

from engines.findings import Cause, Findings, Reason
from engines.versions import ASCEND_PAGE as PAGE
from engines.versions import ASCEND_VERSION

SAMPLER = "vllm_ascend/sample/sampler.py"
REJECTION = "vllm_ascend/sample/rejection_sampler.py"
PROPOSER = "vllm_ascend/spec_decode/llm_base_proposer.py"
LOGITS = "vllm_ascend/ops/vocab_parallel_embedding.py"
RUNNER = "vllm_ascend/worker/model_runner_v1.py"
SCRIPT = f"{PAGE}/reduce_paths.py"
GREEDY_FIX = "`engines.ascend.corrections.reduce:greedy_sample` offers each rank's tokens with their own ids"
CUT = f"{LOGITS}:339: logits = logits[..., : lm_head.num_org_embeddings_per_partition]"

FAILURES: dict[str, tuple[str, ...]] = {}  # cause id -> its failure keys (filled below, from the page's run)

CAUSES = (
    Cause(
        id="A1",
        title="a rank's ids are `local index + rank * width` with the rank's own, cut width: an id on the narrower "
        "last rank comes back shifted",
        where=f"{SAMPLER}, `AscendSampler.greedy_sample` and `_apply_top_k_top_p_pytorch` (and its NPU twin); "
        f"{REJECTION}, `greedy_sample`; {PROPOSER}, `greedy_sample`",
        severity="unreached",
        reaches="every greedy pick and every sampled candidate under `enable_reduce_sample` at tp > 1 with a "
        "vocabulary that is not a multiple of 64: vLLM pads it, and the last rank holding base ids keeps fewer "
        "columns; the common vocabularies (32000, 128256, 151936, 262144) are multiples of 64",
        evidence=(
            CUT,
            f"{SAMPLER}:113: B, V_local = logits.shape",
            f"{SAMPLER}:117: local_global_idx = local_max_indices + rank * V_local  # [B]",
            f"{SAMPLER}:211: local_global_idx = local_idx + rank * V_local",
            f"{REJECTION}:271: local_global_idx = local_max_indices + rank * V_local  # [B]",
            f"{PROPOSER}:127: local_global_idx = local_max_indices + rank * V_local  # [B]",
        ),
        why="Under the switch the logits processor cuts each rank's logits to its base ids "
        "(`num_org_embeddings_per_partition`, `org_vocab_end_index - org_vocab_start_index`), so `V_local` is the "
        "rank's own count, not the shard width every rank starts its ids at. On the last rank holding base ids "
        "that count is smaller, and `rank * V_local` is not its first id. With 100 ids at tp 2 (shards of 64, rank "
        "1 holds ids 64 to 99 in 36 columns) id 99 comes back as 35 + 36 = 71, from all three `greedy_sample` "
        "copies (the script), and `_apply_top_k_top_p_pytorch` labels rank 1's candidates the same way.",
        failures=(
            "ascend_draft_greedy test_ids_beyond_float32_are_exact_or_rejected",
            "ascend_draft_greedy test_the_flag_fires_exactly_on_non_monotone_tables",
            "ascend_draft_greedy test_the_flag_fires_exactly_on_non_monotone_tables #2",
            "test_batch_independence-engines_ascend_subjects_sampling_ascend_rejection_sample-sim-88b72395d7",
            "test_batch_independence-engines_ascend_subjects_sampling_ascend_top_k_top_p-sim-7f4b113b7d",
            "test_exact_under_divergence-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-6ec6447742",
            "test_exact_under_divergence-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-5d1c1217c1",
            "test_exact_under_divergence-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-97e67a3cdc",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_rejection_sample-sim-0c39ed431c",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_top_k_top_p-sim-0af37dbd35",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_top_k_top_p-sim-338c4821ce",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_top_k_top_p-sim-f60e8b376b",
            "test_token_exact-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-cb01db35dd",
            "test_token_exact-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-72f3379678",
            "test_token_exact-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-ebf0a40ee5",
            "test_tp_invariance-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-a7fb879594",
            "test_tp_invariance-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-729567614e",
            "test_tp_invariance-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-cf2de72f27",
        ),
        script=SCRIPT,
        correction=f"{GREEDY_FIX}, from its first id",
    ),
    Cause(
        id="A2",
        title="a rank whose shard holds no base ids fails every reduce: `torch.max` (or `torch.topk`) over no columns "
        "raises",
        where=f"{SAMPLER}, `AscendSampler.greedy_sample` and `_apply_top_k_top_p_pytorch`; {REJECTION}, "
        f"`greedy_sample`; {PROPOSER}, `greedy_sample`",
        severity="error",
        reaches="a vocabulary smaller than (tp - 1) x the padded shard width (64 x tp padding): toy vocabularies at "
        "tp > 1 only",
        evidence=(
            CUT,
            f"{SAMPLER}:116: local_max_logits, local_max_indices = logits.max(dim=-1)",
            f"{REJECTION}:269: local_max_logits, local_max_indices = logits.max(dim=-1)",
            f"{PROPOSER}:125: local_max_logits, local_max_indices = logits.max(dim=-1)",
        ),
        why="The cut leaves a rank past the last base id no column (`num_org_embeddings_per_partition` is 0), and "
        "`logits.max(dim=-1)` over an empty dimension raises `IndexError: max(): Expected reduction dim 1 to have "
        "non-zero size.` (7 ids at tp 2: rank 1 holds none; the script). The contract gives every row a token "
        "whatever the layout: such a rank has no candidate, and the others decide.",
        failures=(
            "test_all_neg_inf_row_with_offset_d2t-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-c1526c62cc",
            "test_determinism-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-f38ed5c8e7",
            "test_determinism-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-b52acb4c10",
            "test_determinism-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-70cc500c5a",
            "test_output_contract-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-bb6228c2d2",
            "test_output_contract-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-6cef512f4b",
            "test_output_contract-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-06412fbc1a",
            "test_output_contract-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-d0cc1ca5fc",
            "test_ranks_agree-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-171b968380",
            "test_ranks_agree-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-62b15ed39a",
            "test_ranks_agree-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-99cdadf32a",
            "test_row_independence-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-4e365af1cc",
            "test_row_independence-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-ab60c05a54",
            "test_row_independence-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-ccd1d980b0",
            "test_the_flag_fires_exactly_on_non_monotone_tables-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-3fcb71aaa5",
            "test_token_exact-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-018935bf17",
            "test_token_exact-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-bb44a9a3cb",
            "test_token_exact-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-130f54f611",
            "test_token_exact-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-2988a53af2",
            "test_tp_invariance-engines_ascend_subjects_greedy_ascend_draft_greedy-gloo-c56cd33169",
            "test_tp_invariance-engines_ascend_subjects_greedy_ascend_rejection_greedy-gloo-ebb6ff98d4",
            "test_tp_invariance-engines_ascend_subjects_greedy_ascend_sampler_greedy-gloo-67cd3f2179",
        ),
        script=SCRIPT,
        correction=f"{GREEDY_FIX}; a rank without tokens offers -inf at its first id",
    ),
    Cause(
        id="A3",
        title="the cut keeps base ids alone: added ids never compete",
        where=f"{LOGITS}, `AscendLogitsProcessor._get_logits_normal`",
        severity="unreached",
        reaches="a head whose vocabulary has ids past its base ones (`num_embeddings` above `org_num_embeddings`, as "
        "LoRA's extra vocabulary made them before vLLM dropped it): no shipped model of vLLM 0.23.0 we know of",
        evidence=(CUT, f"{LOGITS}:120: self.num_org_embeddings_per_partition = ("),
        why="Each rank holds `[base ids | base padding | added ids | added padding]`; without the switch the "
        "processor gathers every column and keeps the first `org_vocab_size` (vLLM's logits vocabulary, which "
        "counts the added ids), under it the rank keeps `[:num_org_embeddings_per_partition]`, its base ids. An "
        "added id whose logit is the row's largest is never offered: the pick is the largest base id's. With 128 "
        "base ids and 8 added at tp 2, an added id 130 that holds the row's only 1.0 comes back as id 0 "
        "(`tests/test_ascend_subjects.py`); in the script's head the pick is base id 6.",
        failures=(),
        script=SCRIPT,
        correction=f"{GREEDY_FIX}: every token column of the shard, added ids included",
    ),
    Cause(
        id="A4",
        title="beside a sampled request, the rejection sampler's greedy rows take a candidate column as their token",
        where=f"{REJECTION}, `rejection_sample` (and `apply_sampling_constraints`)",
        severity="shipped",
        reaches="every speculative step under `enable_reduce_sample` whose batch holds a greedy request beside a "
        "sampled one (temperature above 0): each greedy request's target token, so what it accepts and emits",
        evidence=(
            f"{REJECTION}:347: return apply_top_k_top_p(logits, k, p, top_k)",
            f"{REJECTION}:395: target_logits, target_indices = target_logits_or_tuple",
            f"{REJECTION}:469: target_argmax = greedy_sample(target_logits)",
        ),
        why="When not every request is greedy, `apply_sampling_constraints` returns the reduce's gathered candidates "
        "for the whole batch, `(values [tokens, tp x k], ids)`, greedy rows included. `rejection_sample` unpacks "
        "them as `target_logits, target_indices` and takes `greedy_sample(target_logits)`: the first maximum's "
        "column in the candidate table, plus `rank * width` of a table every rank holds alike (rank 0's wins the "
        "tie), never mapped through `target_indices`. Each rank's candidates come sorted by value, so the token "
        "is the winning rank's first column: with 256 ids at tp 2 and the maximum at id 200, the greedy row's "
        "token is 128 (the script).",
        failures=(),
        script=SCRIPT,
        correction="`engines.ascend.corrections.reduce` picks the greedy rows from the logits "
        "`apply_sampling_constraints` was given",
    ),
    Cause(
        id="A5",
        title="a row without top-k beside rows with one makes the top-k cut index below zero: the sampler raises",
        where=f"{SAMPLER}, `_apply_top_k_top_p_pytorch`'s reduce branch",
        severity="error",
        reaches="every sampling step under `enable_reduce_sample` on the PyTorch branch (devices other than A2 and "
        "A3) whose batch mixes a request with top-k and one without, wherever tp x the largest top-k is below a "
        "rank's width: at tp 4, top-k 50 and 151936 ids, 200 candidates against 37984 columns; on A2 and A3 the "
        "same candidates go to `torch_npu.npu_top_k_top_p`, not judged here",
        evidence=(
            f"{SAMPLER}:221: kk = k.to(torch.long).clamp(min=1, max=V_local)",
            f"{SAMPLER}:222: top_k_count = (probs_sort.size(1) - kk).unsqueeze(1)  # [B,1]",
            f"{SAMPLER}:223: top_k_cutoff = probs_sort.gather(-1, top_k_count)",
        ),
        why="vLLM hands a row without top-k the vocabulary size as its k; the branch clamps it to the rank's width "
        "`V_local` and takes the cutoff at `candidates - kk`, where the candidates are tp x the batch's largest "
        "top-k. Below zero, `gather` raises (`index -124 is out of bounds for dimension 1 with size 4`: 256 ids "
        "at tp 2, rows k 2 and 256; the script) before the mask that would have spared the row. On a device an "
        "out-of-range gather may read another row's memory instead.",
        failures=(
            "test_batch_independence-engines_ascend_subjects_sampling_ascend_rejection_sample-sim-12cc6de557",
            "test_batch_independence-engines_ascend_subjects_sampling_ascend_top_k_top_p-sim-1e1bbb4270",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_rejection_sample-sim-2729b4e2f2",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_top_k_top_p-sim-1738be6f88",
        ),
        script=SCRIPT,
        correction="`engines.ascend.corrections.reduce:apply_top_k_top_p` takes a row's k-th value only where its "
        "top-k is on",
    ),
    Cause(
        id="A6",
        title="ranks of different widths gather candidate tables of different sizes: the collective refuses them",
        where=f"{SAMPLER}, `_apply_top_k_top_p_pytorch`'s reduce branch",
        severity="error",
        reaches="every sampled request under `enable_reduce_sample` at tp > 1 with a vocabulary that is not a "
        "multiple of 64 whenever a rank's candidate count is its width (no top-k in the batch, or a top-k at or "
        "above the narrower rank's width)",
        evidence=(
            f"{SAMPLER}:206: k_for_topk = V_local",
            f"{SAMPLER}:208: k_for_topk = min(top_k, V_local)",
            f"{SAMPLER}:212: gathered_vals = tp_group.all_gather(local_vals, dim=-1)",
        ),
        why="Each rank takes `torch.topk` of `min(top_k, V_local)` (or `V_local` itself) over its own cut width, and "
        "the all-gather needs one size on every rank: with 100 ids at tp 2 the ranks offer 64 and 36 columns, "
        "which HCCL, NCCL and gloo refuse (the script's group refuses as they do).",
        failures=(
            "test_determinism-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-d7d3cebf7e",
            "test_exact_under_divergence-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-dee7b40668",
            "test_kept_set-engines_ascend_subjects_sampling_ascend_rejection_sample-gloo-82f480c2b4",
            "test_kept_set-engines_ascend_subjects_sampling_ascend_top_k_top_p-gloo-771131d7ba",
            "test_output_contract-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-2c03fa6932",
            "test_ranks_agree-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-6aa024d06c",
            "test_row_independence-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-cceeeb5ef7",
            "test_sample_exact-engines_ascend_subjects_sampling_ascend_rejection_sample-gloo-66c0da27e0",
            "test_sample_exact-engines_ascend_subjects_sampling_ascend_top_k_top_p-gloo-034f36e672",
            "test_sample_invariance-engines_ascend_subjects_sampling_ascend_rejection_sample-gloo-3879478c8f",
            "test_sample_invariance-engines_ascend_subjects_sampling_ascend_top_k_top_p-gloo-ce12c4793f",
            "test_sample_log_probs-engines_ascend_subjects_sampling_ascend_rejection_sample-gloo-efe198442a",
            "test_sample_log_probs-engines_ascend_subjects_sampling_ascend_top_k_top_p-gloo-9dd39c358c",
            "test_sample_support-engines_ascend_subjects_sampling_ascend_rejection_sample-gloo-66c0da27e0",
            "test_sample_support-engines_ascend_subjects_sampling_ascend_top_k_top_p-gloo-3583b1917b",
            "test_token_exact-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-78f020d2db",
            "test_tp_invariance-engines_ascend_subjects_greedy_ascend_rejection_greedy_beside_sampled-gloo-a917d762a3",
        ),
        script=SCRIPT,
        correction="`engines.ascend.corrections.reduce:apply_top_k_top_p` offers as many candidates on every rank, "
        "a narrower rank padding with -inf",
    ),
    Cause(
        id="A7",
        title="a top-k at or above a rank's width is taken for no top-k: the row keeps every gathered candidate",
        where=f"{SAMPLER}, `_apply_top_k_top_p_pytorch`'s reduce branch; {RUNNER}, `_sample`",
        severity="unreached",
        reaches="a request whose top-k lies between the rank's width and the vocabulary (at tp 8 over 32000 ids, a "
        "top-k of 4000 or more): such top-k values are unusual",
        evidence=(
            f"{SAMPLER}:224: no_top_k_mask = (kk == V_local).unsqueeze(1)",
            f"{RUNNER}:2624: max_topk = self.input_batch.top_k_cpu[self.input_batch.top_k_cpu < logits.shape[1]].max()",
        ),
        why="`kk` is clamped to the rank's width and a row whose `kk` equals it is marked as having no top-k, so it "
        "keeps all tp x `max_topk` candidates: with 256 ids at tp 2, a row of k 200 beside a row of k 127 keeps "
        "254 tokens, not 200 (the script). The model runner's `max_topk` likewise leaves such rows out, and where "
        "every row with a top-k is such a row its `max()` of nothing raises.",
        failures=(
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_rejection_sample-sim-ab4229c78c",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_top_k_top_p-sim-19e4f28384",
        ),
        script=SCRIPT,
        correction="`engines.ascend.corrections.reduce` applies a top-k wherever it is below the vocabulary, and "
        "`max_topk` is the largest top-k of the rows that have one",
    ),
    Cause(
        id="A8",
        title="with top-k and top-p on one row, top-p is cut on every gathered candidate's probability, before the "
        "row's top-k",
        where=f"{SAMPLER}, `_apply_top_k_top_p_pytorch`'s reduce branch",
        severity="shipped",
        reaches="every sampled request under `enable_reduce_sample` on the PyTorch branch that sets both top-k and "
        "top-p (a common pairing: 50 and 0.9), whenever the batch's candidates reach past the row's top-k (tp > 1, "
        "or a batchmate with a larger top-k)",
        evidence=(
            f"{SAMPLER}:218: probs = gathered_vals.softmax(dim=-1)",
            f"{SAMPLER}:226: elements_to_discard = probs < top_k_cutoff",
            f"{SAMPLER}:229: cumprob = torch.cumsum(probs_sort, dim=-1)",
        ),
        why="`probs` is the softmax of all tp x `max_topk` gathered candidates, taken once; the top-k mask only "
        "writes -inf into the values, and the top-p cutoff is then read from the same `probs`, so the nucleus is "
        "measured against mass the row's top-k has dropped. vLLM's `apply_top_k_top_p` (and the contract) take "
        "top-p over what top-k kept. With 256 ids at tp 2, top-k 4 and top-p 0.5 (8 candidates), the branch keeps "
        "4 tokens where the nucleus of the top 4 holds 2 (the script). The branch without the switch computes its "
        "`probs` before its top-k too, over the whole vocabulary. In this run A1 comes first: with A1 removed "
        "alone, the cases of rows with both masks beside all -inf rows still draw tokens outside the nucleus.",
        failures=(),
        script=SCRIPT,
        correction="`engines.ascend.corrections.reduce:apply_top_k_top_p` takes top-p over what top-k kept",
    ),
    Cause(
        id="A9",
        title="the cut keeps the head's base ids, not the logits vocabulary: an id the processor leaves out competes",
        where=f"{LOGITS}, `AscendLogitsProcessor._get_logits_normal`",
        severity="unreached",
        reaches="a model whose `LogitsProcessor` is built with fewer ids than its head's base ids (`org_vocab_size` "
        "below the head's `org_num_embeddings`): the gathered path cuts to it, the reduce does not",
        evidence=(CUT, f"{LOGITS}:337: logits = logits[..., : self.org_vocab_size]"),
        why="Without the switch the processor gathers the shards and keeps `[..., :self.org_vocab_size]`, the logits "
        "vocabulary; under it each rank keeps every base id it holds. With 128 base ids behind a logits vocabulary "
        "of 100 at tp 2, a row whose maximum is id 110 returns 110 where the classic path picks among ids 0 to 99 "
        "(the script). In this run A1 hides it: the suite's cases with a smaller logits vocabulary also have a "
        "narrower last rank, and with A1 removed alone their tokens are ids at or above the logits vocabulary.",
        failures=(),
        script=SCRIPT,
        correction=f"{GREEDY_FIX}: only ids below the logits vocabulary are tokens",
    ),
    Cause(
        id="A10",
        title="each rank offers exactly its top `max_topk`: tokens tied with the k-th value past a rank's share are "
        "dropped",
        where=f"{SAMPLER}, `_apply_top_k_top_p_pytorch`'s reduce branch",
        severity="shipped",
        reaches="every sampled request with top-k under `enable_reduce_sample` whose k-th largest logit is tied with "
        "one a rank leaves out of its candidates (bfloat16 logits tie often): the request keeps fewer tokens than "
        "its top-k keeps",
        evidence=(f"{SAMPLER}:210: local_vals, local_idx = torch.topk(logits, k=k_for_topk, dim=-1)",),
        why="`torch.topk` takes exactly `k_for_topk` values a rank; where more of the rank's tokens equal its k-th "
        "value, some never reach the gather, and the row's top-k, which keeps every token tied with its k-th value, "
        "cannot keep them. The candidate samplers of vLLM and SGLang do the same (the samplers' page, K1). The "
        "run's tied case at the k-th value draws from a distribution that is not softmax over the kept set; with A1 "
        "removed alone it still does.",
        failures=(
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_rejection_sample-sim-f9f4d0598c",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_top_k_top_p-sim-768f0d04fd",
        ),
        correction="`engines.ascend.corrections.reduce:apply_top_k_top_p` offers every token tied with a rank's k-th "
        "value, as many on every rank",
    ),
)

REASONS = (
    Reason(
        id="N1",
        title="the rejection sampler replaces NaN and infinities before any pick, by design",
        why=f"`AscendRejectionSampler.forward` runs `torch.nan_to_num(nan=0.0, posinf=finfo.max, neginf=finfo.min)` "
        f"on the target logits ({REJECTION}:220-225) on every device but 310P, with the switch or without: a NaN "
        "logit is never the greedy token there, where the contract (and `torch.argmax`) ranks it first. A choice "
        "the engine made for both of its paths; the corrected rows keep it, so their remaining failures are this "
        "one.",
        failures=(
            "test_sampled_distribution-engines_ascend_corrections_reduce_ascend_rejection_sample_corrected-sim-0f6a1a4b53",
            "test_sampled_distribution-engines_ascend_corrections_reduce_ascend_rejection_sample_corrected-sim-bbf05c94ac",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_rejection_sample-sim-9cc0d0dfa2",
            "test_sampled_distribution-engines_ascend_subjects_sampling_ascend_rejection_sample-sim-e3cac8de07",
            "test_token_exact-engines_ascend_corrections_reduce_ascend_rejection_greedy_beside_sampled_corrected-gloo-dbf32d4b45",
            "test_token_exact-engines_ascend_corrections_reduce_ascend_rejection_greedy_corrected-gloo-c4be40f440",
        ),
    ),
    Reason(
        id="N3",
        title="top-p in float32: at an exact share the nucleus keeps or drops its boundary token against the "
        "contract's float64 rule",
        why=f"The branch takes the candidates' `softmax` and a float32 `cumsum` of the sorted probabilities, cuts at "
        f"`cumprob <= 1 - p` and keeps every probability not below the cutoff ({SAMPLER}:228-235), as vLLM's own "
        "PyTorch top-p does. The contract decides the boundary in float64 (a token is kept while the kept mass "
        "above it is below p of the kept mass): where p times the mass equals the mass above a token exactly, "
        "float32 rounding decides, and here it keeps every token of a row whose equal masses make p's share exact. "
        "vLLM's arithmetic, not the reduce's; the corrected rows keep it, so their remaining top-p failures are "
        "this one.",
        failures=(
            "test_kept_set-engines_ascend_corrections_reduce_ascend_top_k_top_p_corrected-gloo-c9a2b92f99",
            "test_sample_exact-engines_ascend_corrections_reduce_ascend_rejection_sample_corrected-gloo-2bd1c69d56",
            "test_sample_exact-engines_ascend_corrections_reduce_ascend_top_k_top_p_corrected-gloo-a1d505490d",
            "test_sample_support-engines_ascend_corrections_reduce_ascend_rejection_sample_corrected-gloo-2bd1c69d56",
            "test_sample_support-engines_ascend_corrections_reduce_ascend_top_k_top_p_corrected-gloo-10d6f880f2",
            "test_sampled_distribution-engines_ascend_corrections_reduce_ascend_rejection_sample_corrected-sim-d0db88d3a5",
            "test_sampled_distribution-engines_ascend_corrections_reduce_ascend_top_k_top_p_corrected-sim-e39bb22581",
        ),
    ),
    Reason(
        id="N2",
        title="not judged here: the NPU kernel `torch_npu.npu_top_k_top_p` and `random_sample`'s draw",
        why=f"On A2 and A3 devices `apply_top_k_top_p` is `_apply_top_k_top_p_torch_npu` ({SAMPLER}:269-300), which "
        "hands the gathered candidates to `torch_npu.npu_top_k_top_p`, an NPU kernel: the candidates it gets are "
        "the PyTorch branch's (A1, A2, A6 reach it alike), its masks are not judged. `random_sample` draws by "
        "exponential races over candidate columns on an NPU stream, keyed by the engine's generators: the sampler "
        "subject draws with the contract's noise over the candidates vllm-ascend keeps instead, so what is judged "
        "is the kept set and the reduce, not the draw's randomness. The rejection sampler's sampled rows (recovered "
        "tokens, acceptance against draft probabilities) are not judged either: only its greedy rows are.",
        failures=(),
    ),
)
FINDINGS = Findings(engine=f"vllm-ascend {ASCEND_VERSION}", page=PAGE, causes=CAUSES, reasons=REASONS)
__all__ = ["CAUSES", "FINDINGS"]
