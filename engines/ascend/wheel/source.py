"""vllm-ascend's source where ``tpargmax install-ascend`` put it, and its functions run from those files.

The registry serves vllm-ascend 0.23.0.post1 as an sdist alone; its modules import ``torch_npu`` (and vLLM 0.23.0)
at import time, so nothing of it is imported.  :func:`functions` parses one of its files and keeps the functions
asked for (:func:`engines.source_functions.source_functions`), with the names they use given here instead of
vllm-ascend's, vLLM's and torch_npu's:

* ``get_tp_group()``: the suite's group as vLLM's ``GroupCoordinator`` offers it (``rank_in_group``,
  ``world_size``, ``all_gather(input_, dim)``: every rank's tensor concatenated along ``dim`` in rank order; the
  suite's group refuses tensors of other shapes, as the collective does).
* ``get_ascend_config()``: ``enable_reduce_sample`` on (the switch under test), ``enable_async_exponential`` off, the
  rejection sampler's block and entropy verification off (their defaults).
* ``torch``: torch, but ``pin_memory=True`` (host memory pinned for the NPU's copies, which a CPU build refuses)
  is dropped where a tensor is made.
* ``logger``: vLLM's, silent.  Device queries (``is_310p``: false, the A2/A3 line the reduce targets) are given
  where a subject names them.

Where the source lies is recorded in ``.engines/vllm-ascend.json`` (gitignored): the released sdist's files, or a
contributor's checkout (``install-ascend --from PATH``).
"""

from __future__ import annotations

import contextvars
import json
import types
from pathlib import Path
from typing import Any

import torch

from engines.source_functions import source_functions
from engines.versions import ASCEND_VERSION
from sharded.group import TPGroup, gathered

SDIST = f"vllm_ascend-{ASCEND_VERSION}.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/ab/7a/32a1b1f13467fb7372588206fa1ffb735f28dcd8504d562f5c7ccdbd90d0/"
    + SDIST
)
SDIST_SHA256 = "a3b9f4a5dd7aa50c37e03d1f35937c4ae5aeacc49b734cac74d59ce5757738e1"
HOME = Path(__file__).resolve().parents[3] / ".engines"  # the checkout's, gitignored
RECORD = HOME / "vllm-ascend.json"
FILES = {
    "sampler": "vllm_ascend/sample/sampler.py",
    "rejection": "vllm_ascend/sample/rejection_sampler.py",
    "proposer": "vllm_ascend/spec_decode/llm_base_proposer.py",
    "logits": "vllm_ascend/ops/vocab_parallel_embedding.py",
    "config": "vllm_ascend/ascend_config.py",
}
ENGINE = ("vllm", "vllm_ascend", "torch_npu")  # their imports are left out; what the kept code uses is given
INSTALL_HINT = "vllm-ascend's source is not installed: run `tpargmax install-ascend` (or `--from PATH`, a checkout)"


def installed() -> dict[str, str] | None:
    """The record ``install-ascend`` wrote (``root``, ``version``, ``origin``: sdist or checkout), or None."""
    try:
        record = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("root"), str) else None


def missing_files(root: Path) -> list[str]:
    """The files the subjects load that ``root`` lacks."""
    return [rel for rel in FILES.values() if not (root / rel).is_file()]


def why_unavailable() -> str | None:
    """Why the subjects cannot run here (no source, a file missing), or None: torch alone runs them."""
    record = installed()
    if record is None:
        return INSTALL_HINT
    missing = missing_files(Path(record["root"]))
    if missing:
        return f"vllm-ascend's source at {record['root']} lacks {', '.join(missing)}: run `tpargmax install-ascend`"
    return None


def source_path(name: str) -> Path:
    """The installed copy of ``FILES[name]``."""
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    return Path(installed()["root"]) / FILES[name]  # type: ignore[index]


def version() -> str:
    """What is installed: the release, or a checkout's version as its record says."""
    record = installed()
    return record["version"] if record else ASCEND_VERSION


RANK: contextvars.ContextVar[TPGroup] = contextvars.ContextVar("ascend_rank")


class GroupCoordinator:
    """The suite's group as vLLM's ``GroupCoordinator`` offers it to vllm-ascend's reductions."""

    def __init__(self, group: TPGroup) -> None:
        self.group = group
        self.rank_in_group = group.rank
        self.world_size = group.world_size

    def all_gather(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return gathered(self.group, input_, dim)


def get_tp_group() -> GroupCoordinator:
    return GroupCoordinator(RANK.get())


CONFIG = types.SimpleNamespace(
    enable_reduce_sample=True,
    enable_async_exponential=False,
    rejection_sampler_config=types.SimpleNamespace(
        enable_block_verify=False, enable_entropy_verify=False, posterior_threshold=0.0, posterior_alpha=0.0
    ),
)


class _Logger:
    """vLLM's logger, silent."""

    def _quiet(self, *args: Any, **kwargs: Any) -> None:
        return None

    debug = debug_once = info = info_once = warning = warning_once = _quiet

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging's name, which newer checkouts ask
        return False


GIVEN: dict[str, Any] = {"get_tp_group": get_tp_group, "get_ascend_config": lambda: CONFIG, "logger": _Logger()}


class _HostTorch(types.ModuleType):
    """torch for the kept code: tensors asked for in pinned memory are made in ordinary memory."""

    def __getattr__(self, name: str) -> Any:
        found = getattr(torch, name)
        if name not in ("tensor", "arange", "ones", "zeros", "full", "empty"):
            return found

        def made(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
            return found(*args, **kwargs)

        return made


HOST_TORCH = _HostTorch("torch")


def functions(name: str, keep: tuple[str, ...] | None, **given: Any) -> types.ModuleType:
    """``FILES[name]``'s functions named in ``keep`` (every statement where None), vllm-ascend's names from
    :data:`GIVEN` and ``given``.  Not cached: each caller keeps its module once."""
    module_name = f"tpargmax_vllm_ascend_{name}_{abs(hash(keep)):x}"
    module = source_functions(module_name, source_path(name), keep, {**GIVEN, **given}, ENGINE, ("numpy",))
    module.torch = HOST_TORCH
    return module


def in_group(group: TPGroup, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with ``group`` as vllm-ascend's TP group."""
    token = RANK.set(group)
    try:
        return fn(*args, **kwargs)
    finally:
        RANK.reset(token)
