"""SGLang's page (``tpargmax report --page sglang``): its shipped GPU local argmax beside its classic path, and its
greedy speculative picks (DFlash's draft samplers, Domino's first token), each greedy pick beside the same pick with
the project's corrections (:mod:`engines.sglang.corrections.greedy`).  One run per head, as the subjects fix different
ones."""

from __future__ import annotations

from engines.versions import SGLANG_VERSION
from tpargmax.report.subjects import Run, Subject, triton_rows

# the recorded names (sharded.impls.MOVED): the page's keys stay
KERNELS, DRAFT, FIXES = "engines.sglang.kernels", "engines.sglang.dflash_draft", "engines.sglang.fixes"
DP_HEAD, SELECTOR, EAGLE = "engines.sglang.dp_lm_head", "engines.sglang.selector", "engines.sglang.eagle_verify"
DOMINO = "engines.sglang.domino_rollout"
KIND = f"SGLang {SGLANG_VERSION}"
# the greedy picks: the subject's module and name, where in the wheel, its correction's module and what it changes
PICKS = (
    (
        DRAFT,
        "sglang_dflash_draft_graph",
        "_DflashDraftSampler (DFlash's draft sampler in its CUDA graph): per-shard torch.max, the gathered table's "
        "first maximum over ranks",
        FIXES,
        "a rank without base ids offers -inf (S2)",
    ),
    (
        DRAFT,
        "sglang_dflash_draft_eager",
        "DFlashWorkerV2._greedy_sample_from_vocab_parallel_head (its eager fallback): base and added maxima, the "
        "gathered table's first maximum over ranks",
        FIXES,
        "a rank without base ids offers -inf (S2, S4), equal values go to the smallest id (S3), a NaN added maximum "
        "counts",
    ),
    (
        DRAFT,
        "sglang_domino_first_ids",
        "_domino_tp_first_ids (Domino's first token of a block) on the rank's logits",
        FIXES,
        "a rank without base ids offers -inf (S2)",
    ),
    (
        DP_HEAD,
        "sglang_dp_lm_head_argmax",
        "LogitsProcessor._gather_attn_tp_logits (--enable-dp-lm-head: the attention-TP group's columns gathered), "
        "then torch.argmax",
        DP_HEAD,
        "every shard gathered whole at its own width, the padding columns then dropped (S5)",
    ),
    (
        SELECTOR,
        "sglang_dflash2_selector_walk",
        "DFlash2's candidate_topk, CandidateSelector.build_lattice and sample_path (the first proposal; codebooks "
        "that add each rank's own logit of a candidate): judged by ranks agree alone",
        SELECTOR,
        "rank 0's proposals broadcast, as sgl-project/sglang #40246 proposes (S6)",
    ),
    (
        DOMINO,
        "sglang_domino_second_token",
        "domino_greedy_rollout's second proposal (a correction from each rank's own copy added to the gathered "
        "logits): judged by ranks agree alone",
        DOMINO,
        "rank 0's proposals broadcast (S9)",
    ),
)


def sglang_runs() -> list[Run]:
    """The kernels' run (natively on a GPU, else under Triton's interpreter, with a collective timeout for its
    speed), then one run per greedy pick and its corrected twin (torch alone runs them: the wheel, no Triton)."""
    interpret, slow = triton_rows()
    needs = f"{KERNELS}:why_unavailable"
    kernels = (
        Subject(
            f"{KERNELS}:sglang_deferred_argmax",
            KIND,
            "LogitsProcessor.deferred_argmax (Triton kernels, soft cap 30)",
            "sglang_deferred_argmax",
            needs=needs,
        ),
        Subject(
            f"{KERNELS}:sglang_classic",
            KIND,
            "finish_deferred_gather, then torch.argmax",
            "sglang_classic",
            needs=needs,
        ),
    )
    eagle_needs = f"{EAGLE}:why_unavailable"
    eagle = (
        Subject(
            f"{EAGLE}:sglang_eagle_verify_greedy",
            KIND,
            "eagle_sample's greedy verify as on CUDA (no broadcast), over drafts each rank picks from its own copy "
            "(the project's model of such a draft): the drafts each request accepted, judged by ranks agree alone",
            "sglang_eagle_verify_greedy",
            needs=eagle_needs,
        ),
        Subject(
            f"{EAGLE}:sglang_eagle_verify_greedy_rocm",
            KIND,
            "the same as on ROCm: rank 0's predictions, accepted indices and counts broadcast (SGLang's own branch)",
            "sglang_eagle_verify_greedy_rocm",
            needs=eagle_needs,
        ),
    )
    runs = [Run(kernels, env=interpret, timeout=slow), Run(eagle, env=interpret, timeout=slow)]
    for module, name, note, fixes, correction in PICKS:
        original = Subject(f"{module}:{name}", KIND, note, name, needs=f"{module}:why_unavailable")
        runs.append(Run((original, original.corrected_twin(fixes, correction))))
    return runs
