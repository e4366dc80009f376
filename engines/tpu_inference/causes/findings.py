"""What tpu-inference 0.32.0's sampler's failures on ``docs/conformance/tpu-inference-0.32.0.md`` come from.

Every failure on the page is claimed by its key (:func:`engines.findings.failure_key`); ``tests/test_findings.py``
checks that each is claimed once and no claim is stale.  The lines are from the ``tpu-inference==0.32.0`` wheel; the
page's runs were made on a simulated JAX mesh of CPU devices (jax 0.10.2), ``DISTRIBUTED_SAMPLING_MAX_TOP_K=8``.
The corrections name the module as the committed page renders them (``engines.tpu_inference_fixes``, now
``engines.tpu_inference.corrections.masks``: the old name still loads through ``sharded.impls.MOVED``).
"""

from __future__ import annotations

from engines.findings import Cause, Findings, Reason
from engines.versions import TPU_INFERENCE_PAGE as PAGE
from engines.versions import TPU_INFERENCE_VERSION

SAMPLING = "tpu_inference/layers/jax/sample/sampling.py"
SEARCH = "tpu_inference/layers/common/binary_search.py"
SCRIPT = f"{PAGE}/masks.py"
CLASSIC = "engines_tpu_inference_sampler_tpu_inference_classic"
SHARDED = "engines_tpu_inference_sampler_tpu_inference_distributed"
FIXED = "engines_tpu_inference_fixes"

CAUSES = (
    Cause(
        id="T1",
        title="top-p on a row with a NaN or +inf logit masks every token: the draw is the row's first position",
        where=f"{SEARCH}, `topp_mask`; {SAMPLING}, `_apply_sampling_transforms` and `_merge_topk_candidates`",
        severity="unreached",
        reaches="every request with top_p < 1 whose logits hold a NaN or +inf (a float16 overflow, a corrupted "
        "activation), on both paths: token 0 on the classic path, the first candidate (rank 0's largest) on the "
        "sharded one",
        evidence=(
            f"{SEARCH}:255: probs = jax.nn.softmax(logits, axis=-1)",
            f"{SEARCH}:294: return jnp.where(probs >= threshold, logits,",
            f"{SAMPLING}:160: topp_masked = topp_mask(logits, top_p, replace_val=-1e12)",
            f"{SAMPLING}:372: sampled_tokens = jax.random.categorical(rng, processed_logits)",
        ),
        why="The softmax of a row with a NaN or a +inf is NaN everywhere (inf - inf), and no NaN passes `probs >= "
        "threshold`, so every token is replaced by -1e12. Beside 1e12 the Gumbel noise is lost in float32 (an ulp "
        "there is 65536), every score is -1e12, and categorical's argmax takes the first position: the classic "
        "path returns token 0 on every draw, whatever its logit. The contract: a row with a NaN or +inf has no "
        "probabilities, top-p keeps what top-k kept, and the first NaN (else the first +inf) wins.",
        failures=(f"test_sampled_distribution-{CLASSIC}-sim-b1e930b023",),
        script=SCRIPT,
        correction="`engines.tpu_inference_fixes:topp_mask` leaves a row with a NaN or +inf as top-k left it (it "
        "has no probabilities), so categorical's argmax returns its first NaN, else its first +inf",
    ),
    Cause(
        id="T2",
        title="top-k's threshold counts the logits above it, which a NaN never is: a NaN never wins, and top-k "
        "keeps more than k",
        where=f"{SEARCH}, `topk_mask`; {SAMPLING}, `_merge_topk_candidates`",
        severity="unreached",
        reaches="every request with top-k whose logits hold a NaN, on both paths",
        evidence=(
            f"{SEARCH}:215: count_gt = jnp.sum(x_for_loop > threshold, axis=reduce_axis)",
            f"{SEARCH}:224: return jnp.where(x >= cutoff, x, jnp.full_like(x, replace_val))",
            f"{SAMPLING}:239: topk_values = jnp.where(candidate_values >= threshold[:, None],",
        ),
        why="The binary search finds the largest cutoff with at least k logits above it, counting with `>`; a NaN "
        "compares false, so it is neither counted nor kept (`x >= cutoff`), and the cutoff falls one value group "
        "lower: the row `[1, 2, nan, 3, 0 x 28]` at k = 4 draws among 3, 2, 1 and the 28 zeros. The sharded "
        "path's merge compares with `>=` too. The contract ranks a NaN above everything, and the first NaN wins.",
        failures=(
            f"test_sampled_distribution-{CLASSIC}-sim-d087fdd6f8",
            f"test_sampled_distribution-{SHARDED}-sim-4bd4fbdccb",
            f"test_equal_paths-{SHARDED}-sim-e9acda72d1",
        ),
        script=SCRIPT,
        correction="`engines.tpu_inference_fixes:topk_mask` searches int32 keys of the order NaN > +inf > finite "
        "(the wheel's own `int32_bsearch`), and `merge_topk_candidates` keeps NaN candidates",
    ),
    Cause(
        id="T3",
        title="top-p thresholds float32 probabilities: tokens whose probabilities round equal stay or go together, "
        "though their logits differ",
        where=f"{SEARCH}, `topp_mask`",
        severity="unreached",
        reaches="rows whose logits differ by less than a float32 softmax resolves: a flattening temperature keeps "
        "every token whatever p (T = 1e30); any two logits closer than a float32 ulp of their probability",
        evidence=(
            f"{SEARCH}:255: probs = jax.nn.softmax(logits, axis=-1)",
            f"{SEARCH}:294: return jnp.where(probs >= threshold, logits,",
        ),
        why="The nucleus is the set of probabilities at or above a threshold found by binary search over float32 "
        "values, so equal probabilities are one group. The contract orders the tokens by x = logit / T and keeps a "
        "token while the mass strictly above it is below p: at T = 1e30 the 300 probabilities are all 1/300 and the "
        "engine keeps all 300 at p = 0.25, where the contract keeps 75.",
        failures=(
            f"test_sample_exact-{CLASSIC}-gloo-791b6df4f6",
            f"test_sample_support-{CLASSIC}-gloo-33fb3fccb0",
            f"test_sampled_distribution-{CLASSIC}-sim-bb167c3cfe",
            f"test_sample_exact-{SHARDED}-gloo-4defcc71ad",
            f"test_sample_support-{SHARDED}-gloo-4defcc71ad",
            f"test_sampled_distribution-{SHARDED}-sim-60fdd830ab",
        ),
        script=SCRIPT,
        correction="`engines.tpu_inference_fixes:topp_mask` searches over x (the wheel's own `float32_bsearch`): the "
        "float32 mass strictly above each token against p times the total, so equal probabilities of different x "
        "part ways",
    ),
)

REASONS = (
    Reason(
        id="C1",
        title="named divergence: the sharded path keys its noise by candidate position, not by token id",
        why=f"`_distributed_topk_sample` draws `jax.random.categorical(rng, filtered_values)` over the "
        f"`[B, tp * 2 * MAX_TOP_K]` gathered candidates ({SAMPLING}:326), so a token's noise depends on its shard and "
        "its place in that shard's `lax.top_k`, and on tp. Token-exactness cannot hold by design; the subject "
        'declares `fn.noise_key = "candidate position"`, and the suite judges its sampled rows by their support '
        "and distribution, its greedy rows token for token.",
        failures=(),
    ),
    Reason(
        id="C2",
        title="temperatures below 1e-5 are greedy, by the engine's convention",
        why=f"`_SAMPLING_EPS = 1e-5` ({SAMPLING}:41) and `is_greedy = tpu_sampling_metadata.temperature < "
        f"_SAMPLING_EPS` ({SAMPLING}:364): such a row takes `jnp.argmax` of its logits, as vLLM's samplers do below "
        "the same threshold. The contract samples every temperature above 0: at T = 1e-6 the noise still decides "
        "among tied maxima, and at a subnormal T every positive logit overflows to +inf, where the first +inf wins. "
        "A convention, not a defect; the corrected rows keep it, so their remaining failures are this one.",
        failures=(
            f"test_sample_exact-{FIXED}_tpu_inference_classic_corrected-gloo-8e459c7ed2",
            f"test_sample_support-{FIXED}_tpu_inference_classic_corrected-gloo-7139a7a964",
            f"test_sample_exact-{FIXED}_tpu_inference_distributed_corrected-gloo-daf9fa3a91",
            f"test_sample_support-{FIXED}_tpu_inference_distributed_corrected-gloo-daf9fa3a91",
        ),
    ),
)

FINDINGS = Findings(
    engine=f"tpu-inference {TPU_INFERENCE_VERSION}'s sampler", page=PAGE, causes=CAUSES, reasons=REASONS
)
__all__ = ["CAUSES", "FINDINGS", "REASONS"]
