"""tpu-inference 0.32.0's top-k and top-p masks (``tpu_inference/layers/common/binary_search.py``): three checks.

The classic path (``sample``'s ``sample_full_vocab``) runs ``_apply_sampling_transforms`` and then
``jax.random.categorical``; this script composes the wheel's own ``topk_mask`` and ``topp_mask`` in that order::

    sampling.py:149  logits = logits / temperatures
    sampling.py:154  topk_masked = topk_mask(logits, top_k, replace_val=-1e12)
    sampling.py:155  logits = jnp.where(should_apply_topk, topk_masked, logits)        # top_k > 0
    sampling.py:160  topp_masked = topp_mask(logits, top_p, replace_val=-1e12)
    sampling.py:161  logits = jnp.where(should_apply_topp, topp_masked, logits)        # top_p < 1
    sampling.py:372  sampled_tokens = jax.random.categorical(rng, processed_logits)

1. T1, a NaN or ``+inf`` with top-p: ``binary_search.py:255 probs = jax.nn.softmax(logits, axis=-1)`` is NaN
   everywhere, so ``binary_search.py:294 jnp.where(probs >= threshold, logits, ...)`` replaces every token with
   ``-1e12``, and ``-1e12 + g`` rounds to ``-1e12`` in float32: ``categorical`` returns token 0 for every key.  The
   contract: such a row has no probabilities, top-p keeps what top-k kept, and the first NaN (``NaN + g`` is NaN),
   else the first ``+inf``, wins.  Rows ``[1, 2, inf, 3, inf, 0 ...]`` (top_k 4, top_p 0.9) and
   ``[1, 2, nan, 3, 0 ...]`` (top_k 0, top_p 0.9): the contract draws id 2 every time.
2. T2, a NaN under top-k: ``binary_search.py:215 count_gt = jnp.sum(x_for_loop > threshold, ...)`` and
   ``binary_search.py:224 return jnp.where(x >= cutoff, x, ...)``: a NaN passes neither comparison, so it is dropped
   and the cutoff falls until k non-NaN values pass ``>``, keeping every value tied with the cutoff.  Row
   ``[1, 2, nan, 3, 0 x 28]``, top_k 4: the contract keeps the NaN (it ranks above everything) and draws id 2; the
   wheel keeps 3, 2, 1 and the 28 zeros.  The sharded path (``_distributed_topk_sample``: each shard's
   ``sampling.py:288 lax.top_k(scaled_logits, 2 * MAX_TOP_K)``, gathered, then ``_merge_topk_candidates``) drops it
   at ``sampling.py:239 jnp.where(candidate_values >= threshold[:, None], candidate_values, -1e12)``; here the
   merge is executed from the wheel's file (parsed, that function alone) on candidates taken as each shard takes
   them (``lax.top_k`` per shard, ids offset by the shard), without a mesh.
3. T3, top-p by float32 probabilities: ``binary_search.py:283 jnp.where(probs_for_reduction >= threshold, ...)``:
   tokens with equal float32 probabilities stay or go together although their logits differ.  At temperature 1e30
   every probability of a 300-token row ``i / 300`` is 1/300: top_p 0.25 keeps all 300; the contract orders by
   ``x = logit / T`` and keeps the 75 largest (ids 225..299).

Standalone: needs jax and the tpu-inference 0.32.0 wheel (``pip install jax==0.10.2 jaxlib==0.10.2`` then
``pip install --no-deps tpu-inference==0.32.0``), nothing else: ``binary_search.py`` imports only jax, and is
executed from the installed package's file by path, without running ``tpu_inference/__init__.py`` (which loads
``tpu_sync`` and ``env_override``, and that imports vLLM).  Runs on the CPU (``JAX_PLATFORMS=cpu`` unless set).
Exit status 1 while any of the three holds, 0 once none does; 2, with one line saying what is missing, where it
cannot be judged.

    python masks.py
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import sys
import types
from pathlib import Path

UNJUDGED = "T1, T2, T3: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {"jax": "jax", "tpu_inference": "the tpu-inference 0.32.0 wheel (pip install --no-deps tpu-inference==0.32.0)"}
FILES = ("layers/common/binary_search.py", "layers/jax/sample/sampling.py")
REPLACE = -1e12  # _apply_sampling_transforms's and _merge_topk_candidates's replace_val
KEYS = 64  # categorical keys per check
MAX_TOP_K = 8  # DISTRIBUTED_SAMPLING_MAX_TOP_K for the sharded half: 2 * 8 candidates from each 16-id shard


def package_root() -> Path | None:
    """The installed ``tpu_inference`` package's folder; ``find_spec`` of a top-level package runs nothing."""
    spec = importlib.util.find_spec("tpu_inference")
    return None if spec is None or not spec.submodule_search_locations else Path(spec.submodule_search_locations[0])


def cannot_judge() -> str | None:
    """What this machine lacks (exit 2), or None."""
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    absent = [name for name in FILES if not (package_root() / name).is_file()]
    return f"the installed tpu_inference has no {', '.join(absent)}" if absent else None


def load_binary_search() -> types.ModuleType:
    """``tpu_inference/layers/common/binary_search.py``, executed from its file (it imports only jax)."""
    spec = importlib.util.spec_from_file_location("tpu_inference_binary_search", package_root() / FILES[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_merge(topp_mask: types.FunctionType) -> types.FunctionType:
    """``sampling.py``'s ``_merge_topk_candidates`` alone, compiled from the wheel's file at its own lines, with the
    names it reads given: jnp, lax, the wheel's ``topp_mask``, and the candidate capacity (2 * :data:`MAX_TOP_K`)."""
    import jax.numpy as jnp
    from jax import lax

    path = package_root() / FILES[1]
    tree = ast.parse(path.read_text(), filename=str(path))
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_merge_topk_candidates"]
    names = {
        "jax": __import__("jax"),
        "jnp": jnp,
        "lax": lax,
        "topp_mask": topp_mask,
        "_distributed_sampling_max_top_k": lambda: MAX_TOP_K,
        "_distributed_sampling_candidates_per_shard": lambda: 2 * MAX_TOP_K,
    }
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), names)  # noqa: S102
    return names["_merge_topk_candidates"]


def transforms(bs: types.ModuleType, logits: list[float], temperature: float, top_k: int, top_p: float):
    """``_apply_sampling_transforms`` on one row (the order quoted in the module docstring)."""
    import jax.numpy as jnp

    x = jnp.asarray([logits], jnp.float32) / jnp.float32(temperature)
    k, p = jnp.asarray([top_k], jnp.int32), jnp.asarray([top_p], jnp.float32)
    x = jnp.where((k > 0)[:, None], bs.topk_mask(x, k, replace_val=REPLACE), x)
    return jnp.where((p < 1.0)[:, None], bs.topp_mask(x, p, replace_val=REPLACE), x)


def kept_ids(values) -> list[int]:
    """The ids of a ``[1, V]`` row the masks left as they were (not the float32 ``-1e12`` they replace with)."""
    import jax.numpy as jnp

    return [int(i) for i in jnp.nonzero(values[0] != jnp.float32(REPLACE))[0]]


def draws(values) -> list[int]:
    """``jax.random.categorical`` of a ``[1, V]`` row under :data:`KEYS` keys, as ``sample`` draws it."""
    import jax

    return [int(jax.random.categorical(jax.random.key(seed), values)[0]) for seed in range(KEYS)]


def t1(bs: types.ModuleType) -> bool:
    """A NaN or +inf with top-p: True while the draw is not the first NaN / +inf."""
    inf, nan = float("inf"), float("nan")
    bad = False
    for label, row, k in (
        ("[1, 2, inf, 3, inf, 0 x 27], top_k 4", [1, 2, inf, 3, inf] + [0] * 27, 4),
        ("[1, 2, nan, 3, 0 x 28], top_k 0", [1, 2, nan, 3] + [0] * 28, 0),
    ):
        got = sorted(set(draws(transforms(bs, row, 1.0, k, 0.9))))
        print(f"T1: {label}, top_p 0.9: the wheel draws {got}; the contract draws [2] (its first NaN or +inf)")
        bad |= got != [2]
    return bad


def t2(bs: types.ModuleType, merge: types.FunctionType) -> bool:
    """A NaN under top-k, classic and sharded: True while it is masked or does not win."""
    import jax.numpy as jnp
    from jax import lax

    row = [1.0, 2.0, float("nan"), 3.0] + [0.0] * 28
    values = transforms(bs, row, 1.0, 4, 1.0)
    kept = kept_ids(values)
    classic = sorted(set(draws(values)))
    print(
        f"T2: [1, 2, nan, 3, 0 x 28], top_k 4: the wheel's topk_mask keeps {len(kept)} ids {kept[:6]}...; "
        "the contract keeps [0, 1, 2, 3] (the NaN ranks first)"
    )
    print(f"T2: classic path draws {classic}; the contract draws [2] (NaN + g is NaN, and NaN wins)")
    shards = 2
    x = jnp.asarray([row], jnp.float32)
    width = x.shape[-1] // shards
    tops = [lax.top_k(x[:, s * width : (s + 1) * width], 2 * MAX_TOP_K) for s in range(shards)]
    cand_values = jnp.concatenate([v for v, _ in tops], axis=-1)
    cand_ids = jnp.concatenate([i + s * width for s, (_, i) in enumerate(tops)], axis=-1)
    filtered, ids, _ = merge(cand_values, cand_ids, jnp.asarray([4], jnp.int32), jnp.asarray([1.0], jnp.float32))
    sharded = sorted({int(ids[0, pos]) for pos in draws(filtered)})
    print(f"T2: sharded path (2 shards, _merge_topk_candidates) draws {sharded}; the contract draws [2]")
    return (2 not in kept) or classic != [2] or sharded != [2]


def t3(bs: types.ModuleType) -> bool:
    """Equal float32 probabilities, different logits: True while top-p does not keep exactly ids 225..299."""
    row = [i / 300 for i in range(300)]
    values = transforms(bs, row, 1e30, 0, 0.25)
    kept = kept_ids(values)
    print(
        f"T3: 300 ids i / 300 at temperature 1e30, top_p 0.25: the wheel's topp_mask keeps {len(kept)}; "
        "the contract keeps 75 (ids 225..299, ordered by x = logit / T)"
    )
    return kept != list(range(225, 300))


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    bs = load_binary_search()
    print(f"tpu-inference {importlib.metadata.version('tpu-inference')}: {package_root() / FILES[0]}")
    found = {"T1": t1(bs), "T2": t2(bs, load_merge(bs.topp_mask)), "T3": t3(bs)}
    for name, present in found.items():
        print(f"{name}: {'present' if present else 'gone'}")
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
