"""The samplers' page (``docs/conformance/sampling.md``): what its failures come from, across engines.

Each engine's causes live in its own package (:mod:`engines.vllm.causes.sampling`,
:mod:`engines.sglang.causes.sampling`); here is the one cause both share (K1, their candidate top-k) and the
page's :data:`FINDINGS`, in page order: vLLM's, K1, then SGLang's.  Every failure on the page is claimed by its key
(:func:`engines.findings.failure_key`); ``tests/test_findings.py`` checks that each is claimed once and no claim is
stale.  Reports recorded before the split name these findings ``engines.sampling_findings:FINDINGS``, which loads
this module through ``sharded.impls.MOVED``.
"""

from __future__ import annotations

from engines.findings import Cause, Findings
from engines.sglang.causes import sampling as sglang
from engines.sglang.causes.sampling import DFLASH
from engines.versions import SAMPLING_PAGE as PAGE
from engines.vllm.causes import sampling as vllm
from engines.vllm.causes.sampling import INTERPRETED, LOGITS

K1 = Cause(
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
    script=f"{PAGE}/candidates_keep_exactly_k.py",
    correction="none here: keeping the ties needs a fallback when a rank's k-th candidate ties (as the "
    "`candidates` built-in does); both corrected rows keep exactly k",
)

CAUSES = (*vllm.CAUSES, K1, *sglang.CAUSES)
REASONS = sglang.REASONS
FINDINGS = Findings(engine="the engines' samplers", page=PAGE, causes=CAUSES, reasons=REASONS)
