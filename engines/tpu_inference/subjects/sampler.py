"""tpu-inference 0.32.0's sampler (``engines.tpu_inference.wheel.adapter``) as two subjects of the sampling contract.

Each rank computes its shard's logits; the ranks all-gather them through ``group`` into the classic path's row
(padding dropped, ordered by global id, scattered through ``d2t`` to the target ids, unmapped targets ``-inf``, as
``sharded.local_sampling.gathered_sample`` and ``reference.sampling.target_logits`` build it).  Rank 0 then runs
the wheel's ``sample`` on a simulated JAX mesh of ``tp = group.world_size`` CPU devices, the logits sharded by
vocabulary, and shares the tokens through ``group``, so every rank returns the same tokens.  The gather is the
harness's glue: tpu-inference's logits arrive at ``sample`` already vocab-sharded on the mesh.

* :func:`tpu_inference_classic`: ``allow_distributed_sampling=False``: temperature, threshold top-k and top-p
  over the full row, then ``jax.random.categorical``; its noise is
  :func:`engines.tpu_inference.wheel.adapter.classic_noise`.
* :func:`tpu_inference_distributed`: ``allow_distributed_sampling=True``: the sharded top ``2 * MAX_TOP_K`` per
  shard, merged, where every row is greedy or has ``1 <= top_k <= MAX_TOP_K``; the classic path otherwise.  Its
  noise is ``categorical`` over ``[B, tp * 2K]`` candidate slots, keyed by shard and rank in the shard's top-k,
  not by token id: it declares no ``fn.noise``, only ``fn.noise_key``.

One key per step: the engine reads no per-row seed, so the key's seed is
:func:`engines.tpu_inference.wheel.adapter.step_seed` of the whole batch's seeds.  The path that ran is each row's note
(``"tpu-inference: <path>"``) and a Hypothesis event: the simulated group's ranks are threads, where Hypothesis's
build context (thread-local) is absent, so the property records the notes on the test's thread.
"""

from __future__ import annotations

import functools

import torch

from engines.tpu_inference.wheel import adapter as tpu
from reference.sampling import target_logits
from sharded.group import TPGroup
from sharded.layout import ShardLayout
from sharded.local_sampling import gathered_logits, sampler, shard_tokens

__all__ = ["tpu_inference_classic", "tpu_inference_distributed"]


def _record(path: str) -> None:
    """A Hypothesis event where there is a build context (the test's thread); nothing elsewhere."""
    try:
        from hypothesis import event
        from hypothesis.control import current_build_context

        current_build_context()
    except Exception:  # noqa: BLE001 - outside a Hypothesis test, or on a rank's thread: no context
        return
    event(f"tpu-inference: {path}")


def _classic_row(
    logits: torch.Tensor, layout: ShardLayout, group: TPGroup, d2t: torch.Tensor | None, vocab: int
) -> torch.Tensor:
    """Every rank's shard gathered into the classic path's target-vocabulary row ``[B, V]``: with ``d2t``, ``V`` the
    target vocabulary the parameters give (``sampling.vocab``), else the largest target + 1.  The classic path's
    noise depends on the row's width, so the engine is handed the whole target vocabulary, as it would be."""
    draft, reached = gathered_logits(logits, layout, group, d2t)
    return target_logits(draft, d2t, None if reached is None else max(reached, vocab))[0]


def run_on_mesh(distributed: bool, sample, hidden, weight, bias, layout, sampling, scale, soft_cap, d2t, group):
    """The subjects' glue: the gathered row, rank 0's ``sample`` (:func:`engines.tpu_inference.wheel.adapter.sample`, or
    the corrected one), its tokens and path shared through ``group`` so that every rank returns them."""
    logits, _, _ = shard_tokens(hidden, weight, bias, layout, scale, soft_cap, d2t, sampling)
    row = _classic_row(logits, layout, group, d2t, sampling.vocab)
    batch = row.shape[0]
    mine = torch.zeros(batch + 2, dtype=torch.int64, device=logits.device)  # (failed, path, tokens)
    failure: Exception | None = None
    if group.rank == 0:
        try:
            seed = tpu.step_seed(sampling.seed)
            args = (sampling.temperature, sampling.top_k, sampling.top_p, seed, group.world_size, distributed)
            tokens, path = sample(row, *args)
            mine[1], mine[2:] = tpu.PATHS.index(path), tokens.to(mine.device)
        except Exception as e:  # noqa: BLE001 - every rank must reach the gather, then raise alike
            failure, mine[0] = e, 1
    shared = group.all_gather(mine)[0]
    if failure is not None:
        raise failure
    if int(shared[0]):
        raise RuntimeError("tpu-inference's sample raised on rank 0")
    path = tpu.PATHS[int(shared[1])]
    _record(path)
    return shared[2:].clone(), None, None, (f"tpu-inference: {path}",) * batch


def on_mesh(name: str, distributed: bool, sample, doc: str):
    """A subject of the sampling contract that runs ``sample`` (the adapter's, or the corrected one) on the mesh,
    ``allow_distributed_sampling=distributed``."""

    return sampler(functools.partial(run_on_mesh, distributed, sample), name, doc)


tpu_inference_classic = on_mesh(
    "tpu_inference_classic",
    False,
    tpu.sample,
    "tpu-inference's ``sample(..., allow_distributed_sampling=False)`` on the gathered row (module docstring).",
)
tpu_inference_distributed = on_mesh(
    "tpu_inference_distributed",
    True,
    tpu.sample,
    "tpu-inference's ``sample(..., allow_distributed_sampling=True)``: its sharded candidate path where it takes the "
    "batch, its classic path elsewhere (module docstring).",
)
for _fn in (tpu_inference_classic, tpu_inference_distributed):
    _fn.masks = ("top_k", "top_p")
    _fn.needs = tpu.why_unavailable  # jax and the wheel: tpargmax install-tpu-inference
    _fn.start = lambda group: tpu.load()  # jax's start and the wheel's imports: outside the collective timeout
tpu_inference_classic.noise = tpu.classic_noise
tpu_inference_classic.noise_key = "step"  # one key per step: a function of every row's seed, the row and the id
tpu_inference_distributed.draws_from_candidates = True
tpu_inference_distributed.noise_key = "candidate position"  # categorical over [B, tp * 2K] slots, not token ids
tpu_inference_distributed.classic_path = "engines.tpu_inference.subjects.sampler:tpu_inference_classic"
