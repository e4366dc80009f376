"""tpu-inference 0.32.0's sampler (vLLM's TPU backend, JAX) run on a mesh of simulated CPU devices.

The code under test is the installed wheel's ``tpu_inference/layers/jax/sample/sampling.py`` (:data:`WHEEL_FILE`):
``sample(rng, mesh, logits, TPUSupportedSamplingMetadata(...), allow_distributed_sampling)``, its classic path
(``_apply_sampling_transforms``, then ``jax.random.categorical`` over ``[B, V]``) and its sharded one
(``_distributed_topk_sample``: each shard's ``lax.top_k(x, 2 * MAX_TOP_K)``, all-gathered, merged).  Nothing is
copied from the wheel: this module only sets its environment, stubs what it imports but never calls, and calls it.

* The mesh is ``("data", "model")`` of shape ``(1, tp)`` over ``jax.devices("cpu")``; XLA makes :data:`DEVICES`
  host devices (``--xla_force_host_platform_device_count``), which must be set before JAX starts its CPU client.
* ``DISTRIBUTED_SAMPLING_MAX_TOP_K`` (:data:`MAX_TOP_K`) is read by the wheel at trace time; the engine's default,
  64, needs ``V / tp >= 128`` for the sharded path, which the suite's vocabularies (24 to ~600 ids, tp 1 to 8)
  rarely reach.  8 needs ``V / tp >= 16``; a value set in the environment is kept.
* The wheel needs jax and NumPy, which the suite's default environment never has: nothing here imports either
  until :func:`why_unavailable`, :func:`sample` or :func:`classic_noise` runs.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import struct
import sys
import threading
import types
from functools import cache
from typing import Any

import torch

from engines.versions import TPU_INFERENCE_VERSION as VERSION

INSTALL = "tpargmax install-tpu-inference"
WHEEL_FILE = "tpu_inference/layers/jax/sample/sampling.py"
DEVICES = 8  # the simulated host devices: tp 1 to 8
TOP_K_ENV = "DISTRIBUTED_SAMPLING_MAX_TOP_K"


def _max_top_k() -> int:
    """The user's ``DISTRIBUTED_SAMPLING_MAX_TOP_K``, else 8 (module docstring: V / tp >= 16 takes the sharded path)."""
    value = os.environ.get(TOP_K_ENV, "8")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{TOP_K_ENV} must be an int, got {value!r}") from None


MAX_TOP_K = _max_top_k()
PATHS = (
    "distributed",
    "classic: fallback (incomplete candidates)",
    "classic: a row the sharded path does not take",
    "classic: V/tp below 2*MAX_TOP_K",
    "classic",
)

MIN_WIDTH, MIN_BATCH = 16, 8


def width(vocab: int) -> int:
    """The row width the engine is handed for a vocabulary of ``vocab``: the next power of two, at least
    :data:`MIN_WIDTH`, the extra columns ``-inf``.  One compiled program serves every vocabulary of a bucket (as
    the engine pads its batches to buckets), and the classic path's noise, which depends on the width, is a function
    of the vocabulary alone."""
    return max(MIN_WIDTH, 1 << (max(vocab, 1) - 1).bit_length())


def _rows(batch: int) -> int:
    """The batch handed to the engine: the next power of two, at least :data:`MIN_BATCH`; the extra rows greedy."""
    return max(MIN_BATCH, 1 << (max(batch, 1) - 1).bit_length())


_LOCK = threading.RLock()  # one JAX call at a time, from whichever thread a rank runs on


def _never_called(name: str):
    def fn(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(f"{name} is a stub of engines.tpu_inference: the sampler never calls it")

    fn.__name__ = name.rpartition(".")[2]
    return fn


def _placeholder(name: str) -> type:
    return type(name.rpartition(".")[2], (), {"__module__": name.rpartition(".")[0]})


class _RequestException(Exception):
    pass


def _no_network(*_args: Any, **_kwargs: Any) -> Any:
    raise _RequestException("engines.tpu_inference: no GCE metadata server on a CPU")


# module -> (its attributes, why it is stubbed).  Installed only where the package is missing (a real vLLM, say,
# is used as it is).  None of these is called by ``sample``; values given as names are placeholder classes.
STUBS: dict[str, tuple[dict[str, Any], str]] = {
    "requests": (
        {"get": _no_network, "RequestException": _RequestException},
        "tpu_info polls the GCE metadata server at import; here the poll fails at once, as on a CPU it would",
    ),
    "vllm.logger": (
        {"_VllmLogger": logging.Logger, "init_logger": logging.getLogger},
        "tpu_inference.logger wraps vLLM's logger; the standard library's stands in",
    ),
    "vllm.sampling_params": ({"SamplingParams": None, "SamplingType": None}, "env_override and input_batch import it"),
    "vllm.envs": ({}, "tpu_inference.utils imports it as a module"),
    "vllm.config.model": ({"PROCESSED_LOGPROBS_MODES": ()}, "sampling.py reads it in logprob helpers never called"),
    "vllm.v1.outputs": ({"LogprobsTensors": None}, "sampling.py's logprob helpers return it; never called"),
    "vllm.lora.request": ({"LoRARequest": None}, "runner.input_batch (imported by sampling_metadata) names it"),
    "vllm.pooling_params": ({"PoolingParams": None}, "runner.input_batch names it"),
    "vllm.utils.collection_utils": ({"swap_dict_values": _never_called}, "runner.input_batch imports it"),
    "vllm.utils.math_utils": ({"cdiv": _never_called}, "runner.block_table imports it"),
    "vllm.v1.core.sched.output": ({"NewRequestData": None}, "runner.input_batch names it"),
    "vllm.v1.pool.metadata": ({"PoolingMetadata": None, "PoolingStates": None}, "runner.input_batch names them"),
    "torchax.ops.mappings": (
        {"j2t_dtype": _never_called, "t2j": _never_called, "t2j_dtype": _never_called},
        "tpu_inference.utils converts torch arrays with torchax; the sampler never does",
    ),
    "flax.nnx": (
        {"Module": None, "Param": None, "List": None},
        "layers/jax/__init__ defines JaxModule(nnx.Module); the sampler is plain functions",
    ),
}


def _install_stubs() -> list[str]:
    """Put :data:`STUBS` in ``sys.modules`` for packages that are not installed; the names stubbed."""
    stubbed = []
    for name, (attrs, _why) in STUBS.items():
        root = name.partition(".")[0]
        if root not in sys.modules and importlib.util.find_spec(root) is not None:
            continue
        if root in sys.modules and not getattr(sys.modules[root], "_tpargmax_stub", False):
            continue
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            mod_name = ".".join(parts[:i])
            if mod_name not in sys.modules:
                module = types.ModuleType(mod_name)
                module.__path__ = []  # a package, so that submodules resolve to these stubs
                module._tpargmax_stub = True
                sys.modules[mod_name] = module
                if i > 1:
                    setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], module)
        module = sys.modules[name]
        for attr, value in attrs.items():
            if value is None:
                value = _placeholder(f"{name}.{attr}")
            elif value is _never_called:
                value = _never_called(f"{name}.{attr}")
            setattr(module, attr, value)
        stubbed.append(name)
    return stubbed


def _set_environment() -> None:
    """XLA's host device count and the CPU platform, before JAX starts; the sharded path's capacity."""
    flag = f"--xla_force_host_platform_device_count={DEVICES}"
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {flag}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault(TOP_K_ENV, str(MAX_TOP_K))


@cache
def load() -> types.SimpleNamespace:
    """jax, the wheel's sampling module, and ``sample`` jitted again (below); raises ImportError where missing."""
    with _LOCK:
        _set_environment()
        stubbed = _install_stubs()
        jax = importlib.import_module("jax")
        quiet = logging.getLogger("vllm.tpu_inference")  # the import-time TPU probes (GCE, /dev/vfio) fail on a CPU
        level, quiet.level = quiet.level, logging.CRITICAL
        try:
            sampling = importlib.import_module("tpu_inference.layers.jax.sample.sampling")
        finally:
            quiet.setLevel(level)
        metadata = importlib.import_module("tpu_inference.layers.jax.sample.sampling_metadata")
        axes = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName
        # Re-jit: the shipped ``@jax.jit(compiler_options=get_sampling_compiler_options())`` asks XLA for a
        # TPU-only option ('xla_tpu_enable_sparse_core_collective_offload_all_gather') that the CPU client rejects.
        statics = ("mesh", "allow_distributed_sampling")
        run = jax.jit(sampling.sample.__wrapped__, static_argnames=statics)
        return types.SimpleNamespace(
            jax=jax,
            jnp=importlib.import_module("jax.numpy"),
            sampling=sampling,
            Metadata=metadata.TPUSupportedSamplingMetadata,
            model=axes.MLP_TENSOR,
            data=axes.ATTN_DATA,
            run=run,
            probe=jax.jit(_probe, static_argnames=("mesh",)),
            stubbed=stubbed,
        )


def _probe(rng, mesh, logits, meta):
    """The engine's own predicates, as ``sample`` evaluates them: every row taken, and the incomplete flag."""
    ns = load()
    supported = ns.sampling._can_sample_distributed(meta)
    logits = logits.astype(ns.jnp.float32)  # as sample() hands them to _distributed_topk_sample
    _, incomplete = ns.sampling._distributed_topk_sample(rng, mesh, logits, meta.temperature, meta.top_k, meta.top_p)
    return supported, incomplete


@cache
def _mesh(tp: int):
    ns = load()
    devices = ns.jax.devices("cpu")
    if not 1 <= tp <= len(devices):
        raise ValueError(f"tp must be 1 to {len(devices)} (the simulated CPU devices), got {tp}")
    model = ns.model if isinstance(ns.model, str) else ns.model[-1]
    data = ns.data if isinstance(ns.data, str) else ns.data[0]
    grid = [devices[:tp]]
    return ns.jax.sharding.Mesh(grid, (data, model)), model


def why_unavailable() -> str | None:
    """None when jax and tpu-inference import and a mesh of every tp up to :data:`DEVICES` can be built; else one
    line ending with the install command.  Imports jax only where it is installed."""
    for package in ("jax", "tpu_inference"):
        if importlib.util.find_spec(package) is None:
            return f"tpu-inference {VERSION}'s sampler needs {package}: {INSTALL}"
    try:
        version = importlib.metadata.version("tpu-inference")
        if version != VERSION:
            return f"tpu-inference {version} is installed, the subjects pin {VERSION}: {INSTALL}"
        _mesh(DEVICES)
    except Exception as e:  # noqa: BLE001 - any failure to start is the reason the subjects cannot run
        return f"tpu-inference {VERSION}'s sampler does not load here ({type(e).__name__}: {e}): {INSTALL}"
    return None


def step_seed(seeds: torch.Tensor) -> int:
    """The step key's seed: tpu-inference draws one key per step for the whole batch, so it is a hash (32 bits) of
    every row's seed, in order: a pure function of the batch's seeds."""
    if not isinstance(seeds, torch.Tensor) or seeds.ndim != 1:
        raise ValueError(f"seeds must be a 1-D tensor, got {seeds!r}")
    packed = struct.pack(f"<{seeds.numel()}q", *seeds.to(torch.int64).tolist())
    return int.from_bytes(hashlib.blake2b(packed, digest_size=4).digest(), "little")


def _to_torch(array) -> torch.Tensor:
    """A (replicated) JAX array as a torch tensor: its first shard, by dlpack."""
    return torch.from_dlpack(array.addressable_shards[0].data)


def classic_noise(seeds: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """float32 ``[B, n]``: the Gumbel noise the classic path adds, ``jax.random.gumbel(key, (B, W), float32)`` as
    ``jax.random.categorical`` draws it, keyed by (step key, row, id).  Threefry counts the flattened position
    ``row * W + id``, so the noise depends on the row's width: ``W = width(n)``, ``n`` the whole vocabulary
    (``ids = arange(n)``), as :func:`sample` pads it.  It is read at ``ids``; an id past the row (the fault models
    key the noise by other keys) reads it modulo ``W``."""
    if not isinstance(ids, torch.Tensor) or ids.ndim not in (1, 2) or ids.dtype.is_floating_point:
        raise ValueError(f"ids must be integer ids [n] or [B, n], got {getattr(ids, 'shape', ids)}")
    n = width(ids.shape[-1])
    if not isinstance(seeds, torch.Tensor) or seeds.ndim != 1 or (ids.ndim == 2 and ids.shape[0] != seeds.shape[0]):
        raise ValueError(f"seeds must be [B] (ids {tuple(ids.shape)}), got {getattr(seeds, 'shape', seeds)}")
    ns = load()
    with _LOCK:
        key = ns.jax.random.key(step_seed(seeds))
        full = _to_torch(ns.jax.random.gumbel(key, (seeds.shape[0], n), ns.jnp.float32)).clone()
    index = ids.cpu().to(torch.int64).remainder(n).expand(seeds.shape[0], ids.shape[-1])
    return full.gather(1, index).to(seeds.device)


def sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    step_seed: int,
    tp: int,
    distributed: bool,
) -> tuple[torch.Tensor, str]:
    """The wheel's ``sample`` on target-vocabulary ``logits [B, V]``, sharded ``P(None, model)`` over ``tp`` CPU
    devices: int64 tokens ``[B]`` and the path that ran (:data:`PATHS`), read from the engine's own predicates.

    The row is padded with ``-inf`` columns to :func:`width` (which no mask keeps while a finite logit is left, and
    whose first maximum on an all ``-inf`` row is id 0, as before), and the batch with greedy rows to
    :func:`_rows`, so one compiled program serves a bucket.  Where ``tp`` does not divide the width, the sharded
    path (``distributed``) gets more ``-inf`` columns, to a multiple of ``tp`` (``shard_map`` needs whole shards),
    so its fallback draws its noise over that width; the classic path gets the row replicated instead, since it
    gathers it first anyway: its noise is :func:`classic_noise`.
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise ValueError(f"logits must be a [B, V] tensor, got {getattr(logits, 'shape', logits)}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"logits must be float32, bfloat16 or float16, got {logits.dtype}")
    batch, vocab = logits.shape
    for name, t in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (batch,):
            raise ValueError(f"{name} must be a [{batch}] tensor, got {getattr(t, 'shape', t)}")
    if bool(((top_k < 0) | (top_k >= 2**31)).any()):
        raise ValueError("top_k must lie in [0, 2**31) (the engine's int32)")
    if not isinstance(step_seed, int) or not 0 <= step_seed < 2**32:
        raise ValueError(f"step_seed must be an int in [0, 2**32), got {step_seed!r}")
    ns = load()
    jnp, jax = ns.jnp, ns.jax
    with _LOCK:
        mesh, model = _mesh(tp)
        wide = width(vocab)
        wide += -wide % tp if distributed else 0
        rows = _rows(batch)
        x = logits.detach().cpu().new_zeros(rows, wide)
        x[:, vocab:] = float("-inf")
        x[:batch, :vocab] = logits.detach().cpu()
        extra = rows - batch
        temperature, top_k, top_p = (
            torch.cat([t.detach().cpu(), t.new_full((extra,), fill).cpu()])
            for t, fill in ((temperature, 0.0), (top_k, 0), (top_p, 1.0))
        )
        spec = jax.sharding.PartitionSpec(None, model) if x.shape[1] % tp == 0 else jax.sharding.PartitionSpec()
        on_mesh = jax.device_put(jnp.from_dlpack(x.contiguous()), jax.sharding.NamedSharding(mesh, spec))
        every = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        meta = ns.Metadata(
            temperature=jax.device_put(jnp.asarray(temperature.cpu().tolist(), jnp.float32), every),
            top_k=jax.device_put(jnp.asarray(top_k.cpu().tolist(), jnp.int32), every),
            top_p=jax.device_put(jnp.asarray(top_p.cpu().tolist(), jnp.float32), every),
            do_sampling=True,
        )
        rng = jax.device_put(jax.random.key(step_seed), every)
        tokens, _ = ns.run(rng, mesh, on_mesh, meta, allow_distributed_sampling=distributed)
        path = _path(ns, rng, mesh, on_mesh, meta, distributed)
        return _to_torch(tokens)[:batch].to(torch.int64).to(logits.device), path


def _path(ns, rng, mesh, logits, meta, distributed: bool) -> str:
    """Which path ``sample`` took, by the engine's predicates, in ``sample``'s order."""
    if not distributed:
        return "classic"
    if not ns.sampling._distributed_sampling_fits(mesh, logits.shape[-1]):
        return "classic: V/tp below 2*MAX_TOP_K"
    supported, incomplete = ns.probe(rng, mesh, logits, meta)
    if not bool(supported):
        return "classic: a row the sharded path does not take"
    return "classic: fallback (incomplete candidates)" if bool(incomplete) else "distributed"
