"""The samplers' page's rows (``tpargmax report --page sampling``): the built-ins, then the engines' samplers, each
with its own install and noise."""

from __future__ import annotations

from dataclasses import replace

from engines.versions import SGLANG_VERSION, vllm_release
from engines.vllm.wheel.build import shipped
from tpargmax.report.subjects import CORRECTED_KIND, SAMPLING, Run, Subject, triton_rows

LEFT_TO_A_GPU = "tp4-added-top-k"
INTERPRETED = f"; under Triton's interpreter without the {LEFT_TO_A_GPU} distribution case (a GPU runs it)"
# vLLM's Triton mask under the interpreter: a minute or more per draw of a 4000-row distribution case, so only the
# token properties run there (its first eight cases took 761 s, and the full selection outran a 900 s row)
TOKEN_PROPERTIES = "test_sample_exact or test_sample_support or test_kept_set or test_sample_log_probs"
TOKENS_INTERPRETED = (
    "; under Triton's interpreter the token properties alone (exactness, support, kept set, log-probabilities): "
    "the distribution, invariance and own-randomness properties are left to a GPU"
)


def sampling_runs() -> list[Run]:
    """The samplers' page: the built-ins, then the engines' samplers (each with its own install and noise).

    Triton's kernels run natively where there is a GPU, else under its CPU interpreter (``TRITON_INTERPRET=1`` in
    the rows' environment, which their replay commands then carry), with a collective timeout for its speed."""
    interpret, slow = triton_rows()
    # The interpreter takes over ten minutes per subject for the 4000-row tp 4 top-k distribution case: there the
    # candidate samplers leave it to a GPU (the page's notes say so), and run every other case.
    top_k_tests = () if not interpret else (*SAMPLING, "-k", f"not {LEFT_TO_A_GPU}")
    token_tests = () if not interpret else (*SAMPLING, "-k", TOKEN_PROPERTIES)
    vllm_needs, kernel = "engines.vllm.wheel.triton_files:why_unavailable", "vLLM kernel"
    sglang_needs = "engines.sglang.subjects.sampling:why_unavailable"
    runs = [
        Run(
            (
                Subject("gumbel_pairs", "built-in", "one packed (score, id) key per row and rank; temperature only"),
                Subject("candidates", "built-in", "each rank's top C, merged; falls back to the gathered logits"),
            ),
            sampling=True,
        ),
        Run(
            (
                Subject(
                    "engines.vllm.gumbel:vllm_gumbel_sharded",
                    kernel,
                    "gumbel_noised_argmax on each shard, keys = the shard's global ids, pairs reduced by argmax",
                    "vllm_gumbel_sharded",
                    needs=vllm_needs,
                ),
                Subject(
                    "engines.vllm.gumbel:vllm_gumbel_sharded_corrected",
                    kernel + CORRECTED_KIND,
                    "the same, its pairs reduced by value and then by the smallest id",
                    "vllm_gumbel_sharded (corrected)",
                    corrects="vllm_gumbel_sharded",
                    needs=vllm_needs,
                ),
                Subject(
                    "engines.vllm.gumbel:vllm_gumbel_as_shipped",
                    kernel + ", as shipped",
                    "the same kernel keyed by the shard's columns, as gumbel_sample keys a row",
                    "vllm_gumbel_as_shipped",
                    needs=vllm_needs,
                ),
            ),
            sampling=True,
            env=interpret,
            timeout=slow,
        ),
        Run(
            (
                Subject(
                    "engines.vllm.dflash2_sampler:vllm_dflash2_sampler",
                    "vLLM layer and kernel",
                    "get_top_k_tokens (and return_log_probs=True) on vLLM's head, then DFlash2's CandidateSampler walk",
                    "vllm_dflash2_sampler",
                    vllm=True,
                    needs=vllm_needs,
                ),
                Subject(
                    "engines.vllm.dflash2_sampler:vllm_dflash2_sampler_corrected",
                    "vLLM layer and kernel" + CORRECTED_KIND,
                    "the same over the corrected get_top_k_tokens (engines.vllm.corrections.processor)",
                    "vllm_dflash2_sampler (corrected)",
                    vllm=True,
                    corrects="vllm_dflash2_sampler",
                    needs=vllm_needs,
                ),
                Subject(
                    "engines.vllm.dflash2_sampler:vllm_dflash2_sampler_step2",
                    "vLLM layer and kernel",
                    "the same walk judged at its second draft step (the seed spec_step_seed mixes from vLLM 0.33.0 on)",
                    "vllm_dflash2_sampler_step2",
                    vllm=True,
                    needs=vllm_needs,
                    since="0.33.0",  # 0.32.0 keys every step by the same seed: its second step is its first
                ),
            ),
            sampling=True,
            env=interpret,
            timeout=slow,
            tests=top_k_tests,
        ),
        Run(
            (
                Subject(
                    "engines.vllm.topk_topp_triton:vllm_topk_topp_triton",
                    kernel,
                    "apply_top_k_top_p_triton on the gathered x = logit / T (its one-program-per-row kernel), then "
                    "the contract's draw over what it keeps",
                    "vllm_topk_topp_triton",
                    needs=vllm_needs,
                    since="0.33.0",  # the 0.32.0 page predates these rows (the same kernel there: T1 says so)
                ),
                Subject(
                    "engines.vllm.topk_topp_triton:vllm_topk_topp_triton_corrected",
                    kernel + CORRECTED_KIND,
                    "the same kernel with T1's correction: the standalone top-p branch's bracket starts at 0",
                    "vllm_topk_topp_triton (corrected)",
                    corrects="vllm_topk_topp_triton",
                    needs=vllm_needs,
                    since="0.33.0",
                ),
                Subject(
                    "engines.vllm.topk_topp_triton:vllm_topk_topp_triton_split",
                    kernel,
                    "_apply_topp_split, the split-row top-p pipeline CUDA takes for at most 64 rows (top-p only)",
                    "vllm_topk_topp_triton_split",
                    needs=vllm_needs,
                    since="0.33.0",
                ),
            ),
            sampling=True,
            env=interpret,
            timeout=slow,
            tests=token_tests,
        ),
        Run(
            (
                Subject(
                    "engines.sglang_sampling:sglang_candidate_topk",  # the recorded names: the page's failure keys stay
                    f"SGLang {SGLANG_VERSION}",
                    "DFlash's candidate_topk (lilicorr_topk_lse, the merge, the log-normaliser); drawn with the "
                    "contract's noise",
                    "sglang_candidate_topk",
                    needs=sglang_needs,
                ),
                Subject(
                    "engines.sglang_sampling:sglang_candidate_topk_corrected",
                    f"SGLang {SGLANG_VERSION}" + CORRECTED_KIND,
                    "the same, ties ordered by id in both top-ks, no lane past the row taken, the lse in float32",
                    "sglang_candidate_topk (corrected)",
                    corrects="sglang_candidate_topk",
                    needs=sglang_needs,
                ),
                Subject(
                    "engines.sglang_sampling:sglang_candidate_topk_seeded",
                    f"SGLang {SGLANG_VERSION}",
                    "the same candidates drawn by multinomial_with_seed (noise keyed by sort rank)",
                    "sglang_candidate_topk_seeded",
                    needs=sglang_needs,
                ),
            ),
            sampling=True,
            env=interpret,
            timeout=slow,
            tests=top_k_tests,
        ),
    ]
    release = vllm_release()
    runs = [replace(run, subjects=tuple(s for s in run.subjects if shipped(s.since, release))) for run in runs]
    return [
        run if not run.tests else replace(run, subjects=tuple(_noted(s, run.tests) for s in run.subjects))
        for run in runs
    ]


def _noted(subject: Subject, tests: tuple[str, ...]) -> Subject:
    return replace(subject, note=subject.note + (TOKENS_INTERPRETED if TOKEN_PROPERTIES in tests else INTERPRETED))
