"""What SGLang 0.5.23's failures on ``docs/conformance/sglang-0.5.23.md`` come from.

Every failure on the page is claimed by its key (:func:`engines.findings.failure_key`); ``tests/test_findings.py``
checks that each is claimed once and no claim is stale.  The lines are from the ``sglang==0.5.23`` wheel.
"""

from __future__ import annotations

from engines.findings import Cause, Findings
from engines.versions import SGLANG_PAGE as PAGE
from engines.versions import SGLANG_VERSION

ROW_ARGMAX = "sglang/kernels/ops/sampling/softcap_row_argmax.py"
WORKER = "sglang/srt/speculative/dflash_worker_v2.py"
DOMINO = "sglang/srt/speculative/domino_utils.py"
LOGITS = "sglang/srt/layers/logits_processor.py"
MODELS = "sglang/srt/models/dflash.py"
EAGLE_UTILS = "sglang/srt/speculative/eagle_utils.py"
DEFERRED = "engines_sglang_kernels_sglang_deferred_argmax"
GRAPH = "engines_sglang_dflash_draft_sglang_dflash_draft_graph"
EAGER = "engines_sglang_dflash_draft_sglang_dflash_draft_eager"
FIRST_IDS = "engines_sglang_dflash_draft_sglang_domino_first_ids"
DP_HEAD = "engines_sglang_dp_lm_head_sglang_dp_lm_head_argmax"
WALK = "engines_sglang_selector_sglang_dflash2_selector_walk"
EAGLE = "engines_sglang_eagle_verify_sglang_eagle_verify_greedy"
SECOND = "engines_sglang_domino_rollout_sglang_domino_second_token"
PROPERTIES = (  # in the page's order: each failed at its first example, the head of one token at tp 2
    "test_token_exact",
    "test_output_contract",
    "test_tp_invariance",
    "test_row_independence",
    "test_determinism",
    "test_ranks_agree",
    "test_exact_under_divergence",
)

CAUSES = (
    Cause(
        id="S1",
        title="the deferred argmax never returns a NaN logit; SGLang's classic path does",
        where=f"{ROW_ARGMAX}, `softcap_row_argmax`'s kernel",
        severity="unreached",
        reaches="every request whose capped logits hold a NaN, on DFlash v2's target verify when every request is "
        "greedy (`LogitsProcessor.deferred_argmax`); `torch.argmax` on the gathered logits returns the NaN",
        evidence=(
            f'{ROW_ARGMAX}:20: best_val = -float("inf")',
            f"{ROW_ARGMAX}:30: block_val, block_idx = tl.max(",
            f"{ROW_ARGMAX}:33: take = block_val > best_val",
        ),
        why="The running best starts at -inf and a block of 4096 columns is kept only if `block_val > best_val`, "
        "which is false for a NaN: a NaN never becomes a rank's best, and the gather over ranks never sees one. The "
        "block reduction (`tl.max(..., return_indices=True)`) is not NaN-aware either. The contract (and "
        "`torch.argmax`) ranks a NaN above every number. Smallest row: `[1.0, nan, 3.0, -2.0]`, where the kernel "
        "returns id 2 and `torch.argmax` id 1 (the script). These runs are Triton's CPU interpreter's (no GPU was "
        "lent); `scripts/gpu_check` records the kernel on CUDA in gpu.md.",
        failures=(f"TRITON_INTERPRET=1 test_token_exact-{DEFERRED}-gloo-6b4eb52744",),
        script=f"{PAGE}/nan_row_argmax.py",
    ),
    Cause(
        id="S2",
        title="a rank whose shard holds no base ids fails the greedy pick: `torch.max` over no columns raises",
        where=f"{WORKER}, `_DflashDraftSampler.__call__`; {DOMINO}, `_domino_tp_first_ids` and "
        "`domino_greedy_rollout`'s shard check",
        severity="error",
        reaches="a vocabulary smaller than (tp - 1) x the padded shard width (64 x tp padding), so only toy "
        "vocabularies: DFlash's draft sampler in its CUDA graph and Domino's first token at tp > 1",
        evidence=(
            f"{WORKER}:198: torch.max(logits, dim=-1, out=(local_max, local_arg))",
            f"{DOMINO}:44: local_max, local_arg = torch.max(local_logits[:, :num_org], dim=-1)",
            f"{DOMINO}:367: num_org <= 0",
        ),
        why="Each rank reduces its base columns `[:num_org]` with `torch.max`; on a rank past the last base id "
        "`num_org` is 0, and `torch.max` over an empty dimension raises `IndexError: max(): Expected reduction dim "
        "1 to have non-zero size.` The contract gives every row a token whatever the layout: such a rank has no "
        "candidate, and the others decide. Every property's first failure here is this one (the shrunk head: "
        "one token at tp 2); on the suite's pinned heads where every rank holds a base id, both return the classic "
        "path's tokens, NaN, signed zeros and ties across ranks included (`tests/test_sglang_dflash.py`). Domino's "
        "rollout checks the shard first and raises `ValueError: Domino TP rollout received an invalid lm_head vocab "
        "shard.`: a clear error, but the same refusal of a layout the contract takes.",
        failures=tuple(
            f"{test}-{subject}-gloo-{digest}"
            for subject, runs in (
                (
                    GRAPH,
                    ("e1e18d8d81", "7def325cd4", "2b75ac084a", "b40795f25e", "45295f93f9", "448864539a", "02f2072d39"),
                ),
                (
                    FIRST_IDS,
                    ("2ca22629ba", "f1d5571cdc", "8d9620db71", "8541030b8d", "d302a73713", "aa5e7de29f", "f88d73b8bd"),
                ),
            )
            for test, digest in zip(PROPERTIES, runs, strict=True)
        )
        + (f"test_ranks_agree-{SECOND}_corrected-gloo-264c9318c4",),  # the rollout's check, behind S9
        script=f"{PAGE}/greedy_paths.py",
        correction="`engines.sglang.corrections.greedy:base_pair`: a rank without base ids offers -inf at its first "
        "id, which loses every tie to a lower rank",
    ),
    Cause(
        id="S3",
        title="the eager draft sampler breaks a tie across ranks by rank: with added ids, a lower rank's added id "
        "beats a higher rank's smaller base id",
        where=f"{WORKER}, `DFlashWorkerV2._greedy_sample_from_vocab_parallel_head`",
        severity="unreached",
        reaches="DFlash's eager draft sampler on a head with added vocabulary (LoRA or added tokens) at tp > 1, "
        "on rows where an added id and a base id share the maximum",
        evidence=(f"{WORKER}:1806: torch.argmax(gathered_max, dim=0, out=best_rank)",),
        why="The gathered table holds one (max, id) pair per rank, and `torch.argmax` over ranks takes the first "
        "maximum, the lowest rank. Without added ids that is the smallest id (shards are contiguous and "
        "ascending); each rank's added ids come after every base id, so rank 0's added id 1015 beats rank 1's "
        "base id 582 at an equal logit, where the contract (and `torch.argmax` over the vocabulary) takes 582.",
        failures=(f"test_token_exact-{EAGER}-gloo-0f378eef3f",),
        script=f"{PAGE}/greedy_paths.py",
        correction="`engines.sglang.corrections.greedy:smallest_id_select`: the largest value over ranks, NaN first, "
        "the smallest id among equal values",
    ),
    Cause(
        id="S4",
        title="the eager draft sampler returns a padding id on an all -inf row: a rank without base ids offers the "
        "dtype's lowest finite value, which beats -inf",
        where=f"{WORKER}, `DFlashWorkerV2._greedy_sample_from_vocab_parallel_head`",
        severity="unreached",
        reaches="DFlash's eager draft sampler at tp > 1 where a rank's shard holds no base ids (toy vocabularies) "
        "and a row's logits are all -inf (a fully masked row)",
        evidence=(
            f"{WORKER}:1716: torch.finfo(weight_dtype).min,",
            f"{WORKER}:1750: global_ids[~is_base] = added_vocab_start + (",
        ),
        why="Without base ids the rank's candidate is `finfo.min` at local row 0, not -inf: on a row that is -inf "
        "everywhere it is the largest value of the table, and it wins. Its local row 0 is not an added row, so the "
        "id mapped from it, `added_vocab_start + (0 - num_org_padded)`, is a padding row's id (or another rank's "
        "id) that no token has. This run's examples (tp 2 and 4 on gloo) drew no such row; the script shows it, and "
        "a run at tp 8 found it as a tie to the higher rank (`Case(batch=63, hidden=6, vocab=105, tp=8, added=175, "
        "seed=61577, bias=True, ties=('whole_row', 'added_max'), specials=('neg_inf_rows',))`: 257, an id of rank "
        "6).",
        failures=(),
        script=f"{PAGE}/greedy_paths.py",
        correction="`engines.sglang.corrections.greedy:base_pair`: a rank without base ids offers -inf",
    ),
    Cause(
        id="S5",
        title="the DP-attention head's gather sizes each shard as vocab / tp: a vocabulary whose shards carry "
        "padding fails the collective",
        where=f"{LOGITS}, `LogitsProcessor._gather_attn_tp_logits`",
        severity="error",
        reaches="`--enable-dp-lm-head` (attention data parallelism) with a model whose `config.vocab_size` is not "
        "a multiple of 64 (and of 64 x tp where tp does not divide it): the head pads its shards and every step's "
        "gather refuses them; the common vocabularies (32000, 128256, 151936, 262144) carry no padding",
        evidence=(
            f"{LOGITS}:1245: if self.vocab_size % self.attn_tp_size == 0:",
            f"{LOGITS}:1250: self.vocab_size // self.attn_tp_size,",
            f"{LOGITS}:1267: list(global_logits.tensor_split(self.attn_tp_size, dim=-1)),",
        ),
        why="Each rank's logits are its padded shard, `num_embeddings_per_partition` columns, but the method sizes "
        "what it gathers from the unpadded `config.vocab_size`: `[tp, rows, vocab // tp]` where tp divides the "
        "vocabulary, else `tensor_split` pieces of `ceil` or `floor(vocab / tp)` columns. Only a vocabulary with no "
        "padding at all fits; otherwise `all_gather_into_tensor` (250 ids at tp 2: 2 x 128 columns into 2 x 125) or "
        "`all_gather` (255 ids: outputs of 128 and 127 columns for inputs of 128) refuses the tensors. The "
        "contract's logits drop padding after the gather. Where no shard carries padding the tokens are the "
        "classic path's (`tests/test_sglang_dp_lm_head.py`).",
        failures=tuple(
            f"{test}-{DP_HEAD}-gloo-{digest}"
            for test, digest in zip(
                PROPERTIES,
                ("15ee207cbe", "8cf01cefc9", "313fb5c781", "d74094eed0", "b19c0aaba8", "04a01ae96c", "b15695b209"),
                strict=True,
            )
        ),
        script=f"{PAGE}/greedy_paths.py",
        correction="`engines.sglang.subjects.dp_lm_head:sglang_dp_lm_head_argmax_corrected` gathers every shard whole, "
        "at its own width, and drops the padding columns after",
    ),
    Cause(
        id="S6",
        title="DFlash2's selector walks lattice scores each rank computes from its own copy of the hidden states, and "
        "nothing broadcasts the proposals: ranks propose different tokens",
        where=f"{MODELS}, `CandidateSelector.build_lattice` and `sample_path`; {WORKER}, the proposals' commit",
        severity="shipped",
        reaches="DFlash2 drafts (a `CandidateSelector`) at tp > 1 wherever the ranks' draft hidden states are not "
        "bit for bit the same (a reduction that does not round alike on every rank, mismatched GPUs, as "
        "sgl-project/sglang #40246 measured): the target verifies different drafts on different ranks",
        evidence=(
            f"{MODELS}:1241: greedy_mask, scores[:, 0, 0].argmax(dim=-1), initial_indices",
            f"{MODELS}:1244: greedy_mask[:, None, None], scores[:, 1:].argmax(dim=-1), local_maps",
            f"{WORKER}:2812: draft_tokens[:, 1:].copy_(draft_next)",
        ),
        why="The candidates are the same on every rank (a gathered top K), but the lattice adds `<A[pred] * "
        "project(h), B[c]>`, with the codebooks replicated and `h` the rank's own draft hidden states, and the greedy "
        "walk takes its argmax on each rank: where two candidates' scores are within the ranks' difference, ranks "
        "pick differently. The worker writes the walk's tokens into the drafts and verifies them with no broadcast "
        "(the sync sites cover the verify's predictions, accept lengths and bonus tokens, not the drafts). The "
        "suite's pinned case of ties across ranks (`Case(batch=8, hidden=6, vocab=400, tp=2, seed=12, "
        "ties=('across_ranks',), rank_ulps=2)`) has rank 0 propose 2 and rank 1 319 on one row.",
        failures=(f"test_ranks_agree-{WALK}-gloo-61d7b9d89e",),
        script=f"{PAGE}/greedy_paths.py",
        correction="`engines.sglang.subjects.selector:sglang_dflash2_selector_walk_corrected` broadcasts rank 0's "
        "proposals, as #40246 does",
    ),
    Cause(
        id="S7",
        title="DFlash2's candidate top-k takes K from each rank's shard: a rank with fewer than K base ids raises",
        where=f"{MODELS}, `candidate_topk`",
        severity="error",
        reaches="a vocabulary with fewer than K (the selector's top_k, 4 to 16) base ids on a rank: toy vocabularies "
        "only",
        evidence=(f"{MODELS}:143: vals, ids = _radix_topk(logits, k)",),
        why="Each rank takes `torch.topk(logits, k)` over its own base ids before the gather: with fewer than k "
        "columns, `RuntimeError: selected index k out of range`. The global top K needs only k ids over all ranks "
        "(a rank can offer what it has, padded with -inf).",
        failures=(f"test_ranks_agree-{WALK}_corrected-gloo-9ace4e0acb",),  # behind S6 on the original row
        script=f"{PAGE}/greedy_paths.py",
    ),
    Cause(
        id="S8",
        title="EAGLE's greedy verify broadcasts its result on ROCm only: on CUDA, ranks whose drafts differ accept "
        "different counts",
        where=f"{EAGLE_UTILS}, `eagle_sample`",
        severity="shipped",
        reaches="EAGLE and n-gram speculative decoding at tp > 1 on CUDA, all requests greedy, wherever the ranks' "
        "drafts differ (a draft that picks on each rank from its own copy: sgl-project/sglang #31071, closed as "
        "inactive, its fix #31478 open): the ranks commit different lengths and the next collective hangs",
        evidence=(
            f"{EAGLE_UTILS}:648: target_predict = torch.argmax(next_token_logits, dim=-1)",
            f"{EAGLE_UTILS}:662: if _is_hip:",
            f"{EAGLE_UTILS}:675: tp_group.broadcast(num_correct_drafts, src=0)",
        ),
        why="The greedy branch takes the argmax of the gathered target logits (the same on every rank) and walks each "
        "rank's own draft tree; only `if _is_hip:` then broadcasts rank 0's predictions, accepted indices and "
        "counts (the sampling branches always do). On the suite's pinned case of ties across ranks, drafts picked "
        "on each rank from its own copy differ on two rows, and the CUDA branch accepts 0 and 1 drafts there on "
        "rank 0, 1 and 0 on rank 1; the ROCm branch (`sglang_eagle_verify_greedy_rocm`, SGLang's own code) agrees "
        "on every case. The drafts are the project's model of a draft that picks on each rank; the tree walk is the "
        "wheel's Triton kernel (XPU's) in place of the CUDA JIT kernel.",
        failures=(f"TRITON_INTERPRET=1 test_ranks_agree-{EAGLE}-gloo-d1e790cabf",),
    ),
    Cause(
        id="S9",
        title="Domino's later tokens add a correction each rank computes from its own copy of the hidden states, and "
        "nothing broadcasts the block: ranks propose different tokens",
        where=f"{DOMINO}, `domino_greedy_rollout`",
        severity="shipped",
        reaches="Domino drafts at tp > 1 wherever the ranks' draft hidden states are not bit for bit the same: every "
        "token of a block after the first",
        evidence=(
            f"{DOMINO}:467: correction_hidden = embed_proj[1](",
            f"{DOMINO}:472: next_ids = torch.argmax(base_logits[index] + correction, dim=-1).to(",
        ),
        why="The first token is the gathered table's pick (the same on every rank); each later one is the argmax of "
        "the gathered base logits plus `embed_proj(cat(z, gru_hidden))`, replicated modules applied to the rank's "
        "own draft hidden states `z`, with no collective after. Where two tokens' sums are within the ranks' "
        "difference, ranks pick differently, and the block's drafts differ (the candidate-pool branch takes its "
        "argmax the same way). With modules that make the correction each rank's own logit, on the suite's "
        "pinned case of ties across ranks at tp 2 rank 0 proposes 9 and 2 where rank 1 proposes 228 and 319 (rows 2 "
        "and 7); on the first pinned case, simulated, rank 3 proposes 896 where ranks 0 to 2 propose 76.",
        failures=(f"test_ranks_agree-{SECOND}-gloo-da3589df27",),
        correction="`engines.sglang.subjects.domino_rollout:sglang_domino_second_token_corrected` broadcasts rank 0's "
        "proposals",
    ),
)

FINDINGS = Findings(engine=f"SGLang {SGLANG_VERSION}", page=PAGE, causes=CAUSES)
__all__ = ["CAUSES", "FINDINGS"]
