"""Standalone repro files: one JSON file per failure, replayable without Hypothesis.

A file holds the drawn structure (the ``Case`` with its seed), the exact input
tensors (inline as hex bytes when small, else in a ``.pt`` side file), the
implementation, the backend, the property, the rule broken, the settings of the
environment variables the implementation reads (``env``: ``TPARGMAX_VLLM_SHM=1``
ran vLLM's shared-memory communicator), and the torch and Hypothesis versions.
Hypothesis's own reproduction blob is kept as an extra, because blobs break
across Hypothesis versions.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import platform
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import hypothesis
import torch

from groups.devices import check_device
from properties.argmax import checks, top_k
from properties.cases.case import TENSORS, Inputs
from properties.cases.plans import plan_from_fields
from properties.failures import replay_backend
from properties.repro import e2e_records
from properties.repro.reader import FORMAT, read_record
from properties.sampling import checks as sampling
from properties.sampling import distribution, exactness, own_randomness
from properties.sampling import log_probs as sampling_log_probs
from properties.sampling import support as sampling_support
from sharded.impls import load_impl

INLINE_BYTES = 64 * 1024


def _encode(t: torch.Tensor) -> dict[str, Any]:
    raw = bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist()) if t.numel() else b""
    return {"dtype": str(t.dtype), "shape": list(t.shape), "hex": raw.hex()}


def write(directory: str | Path, repro: dict[str, Any], blob: str | None = None, test: str = "property") -> Path:
    """Write one failure (``PropertyFailure.repro``) as ``DIR/<test>-<impl>-<backend>-<digest>.json`` (an engine's
    end to end: under ``DIR/e2e/``, in its own format)."""
    if repro.get("kind") == "e2e":
        return e2e_records.write(directory, repro, blob, test)
    inputs: Inputs = repro["inputs"]
    tensors = {name: getattr(inputs, name).cpu() for name in TENSORS if getattr(inputs, name) is not None}
    record = {
        "format": FORMAT,
        "test": test,
        "property": repro["property"],
        "rule": repro["rule"],
        "impl": repro["impl"],
        "backend": replay_backend(inputs),
        "device": inputs.device,  # the tensors are stored on the CPU; replay moves them back there
        "case": repr(inputs.case),
        "case_fields": {f.name: getattr(inputs.case, f.name) for f in fields(inputs.case)},
        "target_vocab": inputs.target_vocab,
        "applied": list(inputs.applied),
        "extra": repro["extra"],
        **({"env": dict(repro["env"])} if repro.get("env") else {}),
        "versions": {
            "torch": torch.__version__,
            "hypothesis": hypothesis.__version__,
            "python": platform.python_version(),
            **repro.get("versions", {}),  # the code under test's own distributions (``Impl.packages``)
        },
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "hypothesis_blob": blob,
    }
    key = [record["case"], record["impl"], record["property"], *([record["extra"]] if record["extra"] else [])]
    key += [record["env"]] if "env" in record else []  # a run in another environment ran other code: its own file
    digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in f"{test}-{repro['impl']}")
    path = Path(directory) / f"{slug}-{record['backend']}-{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if sum(t.numel() * t.element_size() for t in tensors.values()) <= INLINE_BYTES:
        record["tensors"] = {name: _encode(t) for name, t in tensors.items()}
    else:
        side = path.with_suffix(".pt")
        torch.save(tensors, side)
        record["tensors_file"] = side.name
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


class DamagedRepro(ValueError):
    """A repro file that cannot be replayed as it stands; the message is one line and names the file."""


def load(path: str | Path, backend: str | None = None, device: str | None = None) -> tuple[dict[str, Any], Inputs]:
    """The record and its exact inputs (from the stored tensors), on ``backend`` and ``device`` or the recorded
    ones. A device this machine lacks is a ``ValueError`` that says so (not a :class:`DamagedRepro`).

    Repro files come from other machines and other people: every field, the side file's place and the
    tensors' shapes are checked, and anything wrong is a :class:`DamagedRepro`.
    """
    path = Path(path)
    try:
        record, inputs = read_record(path)
    except OSError as exc:
        raise DamagedRepro(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise DamagedRepro(f"{path}: {' '.join(str(exc).split())}") from None
    missing = [key for key in NEEDS.get(record["property"], ()) if key not in record.get("extra", {})]
    if missing:
        raise DamagedRepro(f"{path}: its property replays with extra {missing[0]!r}, which is missing")
    inputs = inputs if backend is None else replace(inputs, backend=backend)
    return record, inputs.on(check_device(device or record.get("device", "cpu")))


TOP_K_CHECKS = {
    top_k.TOP_K_EXACT: top_k.check_top_k_exact,
    top_k.TOP_K_CONTRACT: top_k.check_top_k_contract,
    top_k.TOP_K_DETERMINISM: top_k.check_top_k_determinism,
}
SAMPLING_CHECKS = {
    sampling.SAMPLE_EXACT: exactness.check_sample_exact,
    sampling.SAMPLE_KEPT: exactness.check_kept_set,
    sampling_log_probs.SAMPLE_LOG_PROBS: sampling_log_probs.check_log_probs,
    sampling_support.SAMPLE_SUPPORT: sampling_support.check_support,
}
DISTRIBUTION_CHECKS = {  # the pinned heads' properties, replayed by the head's name
    distribution.SAMPLE_DISTRIBUTION: distribution.check_distribution,
    own_randomness.BATCH_INDEPENDENCE: own_randomness.check_batch_independence,
    own_randomness.EQUAL_PATHS: own_randomness.check_equal_paths,
}
NEEDS = {  # the extra that :func:`check` reads for each property
    checks.ROW_INDEPENDENCE: ("rows",),
    checks.REJECTS: ("bad",),
    top_k.TOP_K_TOP1: ("k", "argmax_impl"),
    **dict.fromkeys(TOP_K_CHECKS, ("k",)),
    **dict.fromkeys([*SAMPLING_CHECKS, sampling.SAMPLE_INVARIANCE], ("sampling",)),
    **dict.fromkeys(DISTRIBUTION_CHECKS, ("distribution",)),
}


def check(record: dict[str, Any], impl, inputs: Inputs) -> None:
    """Run the recorded property (token equality for those that have no replay of their own)."""
    prop, extra = record["property"], record.get("extra", {})
    if prop == checks.ROW_INDEPENDENCE:
        checks.check_row_independence(impl, inputs, extra["rows"])
    elif prop == checks.REJECTS:
        checks.check_rejects(impl, inputs, extra["bad"])
    elif prop == checks.TP_INVARIANCE:
        checks.check_tp_invariance(impl, inputs, extra.get("tps"))
    elif prop == checks.DETERMINISM:
        checks.check_determinism(impl, inputs)
    elif prop == top_k.TOP_K_TOP1:
        top_k.check_top1_is_argmax(impl, load_impl(extra["argmax_impl"]), inputs, extra["k"])
    elif prop in TOP_K_CHECKS:
        TOP_K_CHECKS[prop](impl, inputs, extra["k"])
    elif prop in SAMPLING_CHECKS:
        SAMPLING_CHECKS[prop](impl, inputs, sampling.plan_for(impl, plan_from_fields(extra["sampling"])))
    elif prop == sampling.SAMPLE_INVARIANCE:
        plan = sampling.plan_for(impl, plan_from_fields(extra["sampling"]))
        sampling.check_sample_invariance(impl, inputs, plan, extra.get("tps"))
    elif prop in DISTRIBUTION_CHECKS:
        DISTRIBUTION_CHECKS[prop](impl, distribution.BY_NAME[extra["distribution"]])
    else:
        checks.check_output_contract(impl, inputs)
        checks.check_token_exact(impl, inputs)
