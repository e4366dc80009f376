"""vllm-ascend's page (``tpargmax report --page ascend``): its reduce sampling (``enable_reduce_sample``) judged from
the released sdist's files, each subject beside the same subject with the project's corrections
(:mod:`engines.ascend.corrections.reduce`).  One run per head: the target's picks and sampler take no ``d2t``, the
draft proposer's pick does."""

from __future__ import annotations

from engines.versions import ASCEND_VERSION
from tpargmax.report.subjects import Run, Subject

GREEDY, SAMPLING, FIXES = (
    "engines.ascend.subjects.greedy",
    "engines.ascend.subjects.sampling",
    "engines.ascend.corrections.reduce",
)
KIND = f"vllm-ascend {ASCEND_VERSION}"
NEEDS = "engines.ascend.wheel.source:why_unavailable"
# each subject: its module and name, and what runs of vllm-ascend
TARGET = (
    (
        GREEDY,
        "ascend_sampler_greedy",
        "AscendSampler.greedy_sample (the sampler's greedy pick), on each rank's logits as _get_logits_normal cuts "
        "them",
    ),
    (
        GREEDY,
        "ascend_rejection_greedy",
        "AscendRejectionSampler.forward, every request greedy with one draft: apply_sampling_constraints, "
        "rejection_sample and its greedy_sample",
    ),
    (
        GREEDY,
        "ascend_rejection_greedy_beside_sampled",
        "the same step with one sampled request (temperature 1, top-p 0.9) after the greedy ones: the greedy rows "
        "judged",
    ),
)
DRAFT = (
    (
        GREEDY,
        "ascend_draft_greedy",
        "AscendSpecDecodeBaseProposer.compute_draft_token_ids for an EAGLE3 draft: greedy_sample, then d2t",
    ),
)
SAMPLER = (
    (
        SAMPLING,
        "ascend_top_k_top_p",
        "the sampler: greedy rows by greedy_sample, the rest by the contract's draw over "
        "_apply_top_k_top_p_pytorch's gathered candidates (the reduce branch)",
    ),
    (
        SAMPLING,
        "ascend_rejection_sample",
        "AscendRejectionSampler.forward verifying one n-gram draft per row: the first output token (sampled rows: "
        "the engine's acceptance test and recovered-token race, judged by support and distribution)",
    ),
)


GREEDY_FIX = (
    "each rank's whole shard, its tokens' ids from its first id (added ids compete, a rank without tokens offers "
    "-inf), the largest value over ranks and the smallest id among equals; the rejection sampler's greedy rows "
    "from the logits apply_sampling_constraints was given"
)
SAMPLER_FIX = (
    "the greedy pick corrected as above; every rank offers as many candidates (the largest top-k and its ties, or "
    "every token), with its tokens' own ids; top-k where it is below the vocabulary, top-p over what top-k kept"
)


def _subjects(entries: tuple[tuple[str, str, str], ...], correction: str) -> tuple[Subject, ...]:
    """Each entry's row, then its corrected twin's."""
    originals = [Subject(f"{module}:{name}", KIND, note, name, needs=NEEDS) for module, name, note in entries]
    return tuple(row for original in originals for row in (original, original.corrected_twin(FIXES, correction)))


def ascend_runs() -> list[Run]:
    """The target's greedy picks, the draft proposer's pick and the sampler, each beside its corrected twin."""
    return [
        Run(_subjects(TARGET, GREEDY_FIX)),
        Run(_subjects(DRAFT, GREEDY_FIX)),
        Run(_subjects(SAMPLER, SAMPLER_FIX), sampling=True),
    ]
