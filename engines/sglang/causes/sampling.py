"""SGLang's causes and reasons on the samplers' page (``docs/conformance/sampling.md``): S1 and S2, DFlash's
candidate top-k, and C1, its seeded sampler's noise.

:mod:`engines.sampling_page` puts them on the page after vLLM's (:mod:`engines.vllm.causes.sampling`) and the
cause both engines share (K1).  Each claims its failures by key (:func:`engines.findings.failure_key`); the lines
quoted are from ``sglang==0.5.23``, and the page's runs were made under Triton's CPU interpreter (no GPU was
available).  S1's correction names the module as the committed page renders it (``engines.sglang_sampling``, now
``engines.sglang.subjects.sampling``: the name still loads through ``sharded.impls.MOVED``).
"""

from __future__ import annotations

from engines.findings import Cause, Reason
from engines.versions import SAMPLING_PAGE as SCRIPTS

DFLASH = "sglang/srt/models/dflash.py"
INTERPRETED = "TRITON_INTERPRET=1 "  # the environment the page's rows ran in, as their failures' keys begin

CAUSES = (
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
