"""tpu-inference 0.32.0's masks corrected: the project's JAX functions put over the wheel's, and the corrected subjects.

The wheel's ``sample`` (``engines.tpu_inference.wheel.adapter``) masks with
``tpu_inference/layers/common/binary_search.py``'s ``topk_mask`` and ``topp_mask`` (classic path) and ``sampling.py``'s
``_merge_topk_candidates`` (sharded path). Three defects (``docs/conformance/tpu-inference-0.32.0/masks.py`` reproduces
them):

* T1: ``topp_mask`` takes ``softmax`` of a row holding a NaN or ``+inf``: NaN everywhere, every token is replaced
  by ``-1e12``, and ``-1e12 + g`` rounds to ``-1e12`` in float32, so ``categorical`` always returns token 0.
* T2: ``topk_mask`` counts ``x > threshold`` and keeps ``x >= cutoff``: a NaN passes neither, so it is dropped and
  the cutoff falls, keeping more than k tokens; ``_merge_topk_candidates`` drops it with ``>= threshold`` too.
* T3: ``topp_mask`` thresholds float32 probabilities: tokens with equal probabilities (all of them at
  ``T = 1e30``) stay or go together although their ``x`` differ.

Corrections (the contract of ``reference.sampling``, steps 2 and 3):

Both masks keep the wheel's own searches (``binary_search.int32_bsearch`` / ``float32_bsearch``: 32 reductions over
the row, no sort, which on a CPU mesh of 8 simulated devices and a 262144-wide row would take minutes), with what
they search over corrected:

* :func:`topk_mask`: keep ``x >=`` the row's k-th largest in the order NaN > ``+inf`` > finite (``-0.0 == +0.0``),
  every token tied with the k-th kept: the search runs over int32 keys of that total order, not over ``x``.
* :func:`topp_mask`: ordered by ``x``, not by probabilities: masses ``exp(x - max)`` over the tokens it is handed
  (the ones top-k dropped hold ``-1e12``: mass 0, and where one "stays" it stays ``-1e12``), the mass strictly above
  each token, kept while below ``p`` times the total; equal ``x`` stay or go together, the largest always stays.
  A row with a NaN or ``+inf`` (only a token top-k kept can be one) or no finite value has no probabilities: kept
  as it is, so ``categorical``'s ``argmax`` returns its first NaN (``NaN + g`` is NaN), else its first ``+inf``.
* :func:`merge_topk_candidates`: the wheel's merge with NaN candidates kept (``lax.top_k`` already ranks NaN
  first, so its threshold is right), and a shard whose last candidate is NaN counted as incomplete.

Float32 is all JAX has here (x64 off): ``exp(x - max)``, the mass above a token and the total are float32 sums
(XLA's reduction order) where the contract's are float64 (``exp`` rounded once more, and summed with float32
rounding), so a token whose mass above lies within a few float32 ulps of ``p`` times the total (``p`` planted at a
share of the mass, many small masses summed) can land on the other side of the boundary.  Rows whose masses are
all 0 or 1 (equal ``x``, or ``x`` flattened by a huge temperature) sum exactly in both, below ``2**24`` tokens.

JAX detail: the adapter's ``load().run`` traces the wheel's ``sample`` once per shape with the module globals present
at trace time and caches the program, so patching the globals would not reach it.  The corrected subjects run their
own jitted wrappers (:func:`_jits`: other function objects, so other caches), traced while the corrections are in
the wheel's namespace; :func:`corrections` holds the adapter's lock, puts them (``engines.findings.Patch``) and
swaps ``load().run`` / ``load().probe`` for the wrappers, and restores all of it after the call.  The adapter is
not edited: its ``sample`` calls ``load().run`` and ``load().probe``, whatever they are while its lock is held.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import torch

from engines.findings import Patch, applied
from engines.tpu_inference.subjects import sampler as original
from engines.tpu_inference.wheel import adapter as tpu

__all__ = [
    "PATCHES",
    "corrections",
    "merge_topk_candidates",
    "topk_mask",
    "topp_mask",
    "tpu_inference_classic_corrected",
    "tpu_inference_distributed_corrected",
]

SAMPLING = "tpu_inference.layers.jax.sample.sampling"
BINARY_SEARCH = "tpu_inference.layers.common.binary_search"
INT32_MAX = (1 << 31) - 1


def _search() -> Any:
    """The wheel's ``binary_search`` module: the corrections reuse its searches over int32 and float32 bits."""
    return importlib.import_module(BINARY_SEARCH)


def _order_keys(x: Any) -> Any:
    """int32 keys whose order is the contract's top-k order of float32 ``x``: NaN (any sign, any payload) above
    ``+inf`` above every finite value, ``-0.0`` equal to ``+0.0`` (IEEE bits, negatives' magnitude bits flipped)."""
    jnp, lax = tpu.load().jnp, tpu.load().jax.lax
    x = jnp.where(x == 0, jnp.zeros_like(x), x)  # -0.0 -> +0.0: one key
    bits = lax.bitcast_convert_type(x, jnp.int32)
    keys = jnp.where(bits < 0, bits ^ jnp.int32(INT32_MAX), bits)
    return jnp.where(jnp.isnan(x), jnp.int32(INT32_MAX), keys)


def topk_mask(x: Any, k: Any, replace_val: Any) -> Any:
    """The wheel's ``topk_mask(x, k, replace_val)`` with NaN ranked above ``+inf`` above everything: the wheel's
    ``int32_bsearch`` over the order keys finds the largest int32 ``r`` with at least k keys above it, and every
    token whose key is above ``r`` stays (at least the k-th largest: ties at the k-th value all stay, so more than k
    may); the rest become ``replace_val``.  ``k`` is per row (``[batch...]``) or one value; k above the row keeps it
    all.  ``k <= 0`` is taken as 1 (the caller applies top-k only where ``k > 0``, as _apply_sampling_transforms)."""
    jnp = tpu.load().jnp
    keys = _order_keys(x)
    k = jnp.maximum(jnp.broadcast_to(jnp.asarray(k, jnp.int32), x.shape[:-1]), 1)

    def fewer_than_k_above(t: Any) -> Any:
        return jnp.sum(keys > t[..., None], axis=-1) < k

    r = _search().int32_bsearch(x.shape[:-1], fewer_than_k_above)
    return jnp.where(keys > r[..., None], x, jnp.full_like(x, replace_val))


def topp_mask(logits: Any, p: Any, replace_val: Any) -> Any:
    """The wheel's ``topp_mask(logits, p, replace_val)`` ordered by the logits (module docstring): its
    ``float32_bsearch`` over ``x`` itself, not over probabilities, finds the largest ``r`` whose mass above
    (float32 ``exp(x - max)`` of the tokens with ``x > r``) is still at least ``p`` times the row's mass; the tokens
    with ``x > r`` stay, which is each token whose mass strictly above is below ``p`` times the total.  Rows with a
    NaN, a ``+inf`` or no finite value stay as they are."""
    jnp = tpu.load().jnp
    x = logits
    special = jnp.any(jnp.isnan(x) | (x == jnp.inf), axis=-1) | ~jnp.any(jnp.isfinite(x), axis=-1)
    safe = jnp.where(special[..., None], jnp.zeros_like(x), x)
    e = jnp.exp(safe - jnp.max(safe, axis=-1, keepdims=True))
    p = jnp.broadcast_to(jnp.asarray(p, x.dtype), x.shape[:-1])
    share = p * jnp.sum(e, axis=-1)

    def mass_above_below_share(t: Any) -> Any:
        return jnp.sum(jnp.where(safe > t[..., None], e, 0.0), axis=-1) < share

    r = _search().float32_bsearch(x.shape[:-1], mass_above_below_share)
    keep = (safe > r[..., None]) | (safe == jnp.max(safe, axis=-1, keepdims=True)) | special[..., None]
    return jnp.where(keep, logits, jnp.full_like(logits, replace_val))


def merge_topk_candidates(candidate_values: Any, candidate_ids: Any, top_k: Any, top_p: Any) -> tuple[Any, Any, Any]:
    """The wheel's ``_merge_topk_candidates`` keeping NaN candidates: ``lax.top_k`` ranks NaN first, so the k-th
    value (``threshold``) is the contract's; a candidate stays where it is NaN or ``>= threshold`` (a NaN threshold
    keeps the NaNs alone).  A shard is incomplete where its last candidate reaches the threshold or is NaN (it may
    have left out more NaNs); top-p is :func:`topp_mask` (the sampling module's ``topp_mask``, patched alike)."""
    ns = tpu.load()
    jnp, lax, sampling = ns.jnp, ns.jax.lax, ns.sampling
    per_shard = sampling._distributed_sampling_candidates_per_shard()
    if candidate_values.shape[-1] % per_shard != 0:
        raise ValueError("Candidate dimension must contain complete shards")
    global_topk, _ = lax.top_k(candidate_values, sampling._distributed_sampling_max_top_k())
    threshold = jnp.take_along_axis(global_topk, top_k[:, None] - 1, axis=-1)
    tails = candidate_values.reshape(candidate_values.shape[0], -1, per_shard)[:, :, -1]
    incomplete = jnp.any(jnp.isnan(tails) | (tails >= threshold), axis=-1)
    kept = jnp.isnan(candidate_values) | (candidate_values >= threshold)
    topk_values = jnp.where(kept, candidate_values, -1e12)
    return topp_mask(topk_values, top_p, replace_val=-1e12), candidate_ids, incomplete


PATCHES = (
    Patch(f"{SAMPLING}:topk_mask", topk_mask),
    Patch(f"{SAMPLING}:topp_mask", topp_mask),
    Patch(f"{SAMPLING}:_merge_topk_candidates", merge_topk_candidates),
)


@cache
def _jits() -> tuple[Any, Any]:
    """The corrected subjects' own jits of the wheel's ``sample`` and of the adapter's path probe: other function
    objects than the adapter's, so their programs are traced (with :data:`PATCHES` in place) and cached apart."""
    ns = tpu.load()

    def sample_corrected(rng, mesh, logits, tpu_sampling_metadata, allow_distributed_sampling=True):
        return ns.sampling.sample.__wrapped__(rng, mesh, logits, tpu_sampling_metadata, allow_distributed_sampling)

    def probe_corrected(rng, mesh, logits, meta):
        return tpu._probe(rng, mesh, logits, meta)

    run = ns.jax.jit(sample_corrected, static_argnames=("mesh", "allow_distributed_sampling"))
    return run, ns.jax.jit(probe_corrected, static_argnames=("mesh",))


@contextmanager
def corrections() -> Iterator[None]:
    """:data:`PATCHES` in the wheel's module and the corrected jits as ``load().run`` / ``load().probe``, under the
    adapter's lock (the simulated ranks are threads; the uncorrected subjects never see either), restored after."""
    ns = tpu.load()
    run, probe = _jits()
    with tpu._LOCK, applied(PATCHES):
        saved = ns.run, ns.probe
        ns.run, ns.probe = run, probe
        try:
            yield
        finally:
            ns.run, ns.probe = saved


def sample(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, str]:
    """``engines.tpu_inference.wheel.adapter.sample`` with the corrections (same arguments)."""
    with corrections():
        return tpu.sample(*args, **kwargs)


tpu_inference_classic_corrected, tpu_inference_distributed_corrected = (
    original.on_mesh(
        f"{fn.__name__}_corrected",
        distributed,
        sample,
        f":func:`engines.tpu_inference.subjects.sampler.{fn.__name__}` with the corrections (a correction, not "
        "tpu-inference's code).",
    )
    for fn, distributed in ((original.tpu_inference_classic, False), (original.tpu_inference_distributed, True))
)


# The originals' declarations (masks, needs, start, noise, noise_key, draws_from_candidates): the
# corrections change which tokens are kept, not the noise or the paths.
tpu_inference_classic_corrected.__dict__.update(original.tpu_inference_classic.__dict__)
tpu_inference_distributed_corrected.__dict__.update(original.tpu_inference_distributed.__dict__)
tpu_inference_distributed_corrected.classic_path = f"{__name__}:tpu_inference_classic_corrected"
