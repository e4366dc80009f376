"""Reading a repro file as untrusted input: a record from another machine, checked field by field.

A repro file arrives as a nightly artifact or an attachment to a bug report.
Reading one runs no code: the JSON is data, the ``Case`` is rebuilt from its
fields (:mod:`properties.cases.text`), tensors come inline as hex or from a
side file beside the record through ``torch.load(weights_only=True)``, and every
tensor's dtype and shape must be the ones its case builds.  Each problem is a
``ValueError`` with a one-line message.  The recorded implementation is the
exception by design: replaying a file imports the module it names.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from groups.devices import DEVICES
from properties.argmax.checks import BAD_INPUTS
from properties.cases.case import DTYPES as CASE_DTYPES
from properties.cases.case import Case, Inputs, layouts_of, shown
from properties.cases.plans import plan_from_fields
from properties.cases.text import case_from_fields
from properties.repro.torch_files import load_weights_only
from properties.sampling.distribution import BY_NAME
from reference.checks import check_d2t

FORMAT = "tpargmax-repro/2"
OLD_FORMATS = ("tpargmax-repro/1",)  # weight held every padded row in rank order (no added ids then)
BACKENDS = ("sim", "gloo")
MAX_RECORD_BYTES = 16 * 2**20  # inline tensors stop at 64 KiB: a record is a few hundred KiB at most
MAX_SIDE_BYTES = 2**30  # a case's tensors stay under 2 x 256 MiB (properties.cases.case.MAX_ELEMENTS)
TENSOR_DTYPES = {str(d): d for d in (*CASE_DTYPES.values(), torch.int64)}  # a case's dtypes, and d2t's
TEXT_FIELDS = ("property", "rule", "impl", "backend", "case")  # printed by replay and promote
RECORD_FIELDS = {**dict.fromkeys(TEXT_FIELDS, str), "case_fields": dict, "target_vocab": int, "applied": list}


def read_json(path: Path, limit: int, what: str) -> dict[str, Any]:
    """The JSON object in the file at ``path`` (``what`` it should be, for messages); ``ValueError`` (one line) if
    it is larger than ``limit`` bytes, not UTF-8, not JSON or not an object, ``OSError`` if unreadable."""
    size = path.stat().st_size
    if size > limit:
        raise ValueError(f"{size} bytes: {what} is at most {limit}")
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"not UTF-8 text, so not {what}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an integer of more digits than Python reads
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ValueError(f"not {what}: expected a JSON object, got {type(record).__name__}")
    return record


def read_record(path: Path) -> tuple[dict[str, Any], Inputs]:
    """The record at ``path`` and the inputs it holds; ``ValueError`` (one line) or ``OSError`` if damaged."""
    record = read_json(path, MAX_RECORD_BYTES, "a repro record")
    if record.get("format") not in (FORMAT, *OLD_FORMATS):
        raise ValueError(f"not a {FORMAT} file (format {shown(record.get('format'))})")
    _check_fields(record)
    case = case_from_fields(record["case_fields"])
    if record["case"] != repr(case):
        raise ValueError(f"its 'case' string {shown(record['case'])} is not its case_fields' case {case!r}")
    if record["backend"] not in BACKENDS:
        raise ValueError(f"'backend' must be one of {BACKENDS}, got {shown(record['backend'])}")
    if record.get("device", "cpu") not in DEVICES:  # older records ran on the CPU and do not say so
        raise ValueError(f"'device' must be one of {DEVICES}, got {shown(record['device'])}")
    layouts = layouts_of(case)
    logits_vocab = layouts[0].vocab
    _check_extra(record.get("extra", {}), case, logits_vocab)
    tensors = _tensors(path, record, case, logits_vocab)
    target_vocab = logits_vocab + (case.target_extra if case.d2t != "none" else 0)
    if record["target_vocab"] != target_vocab:
        raise ValueError(f"'target_vocab' is {record['target_vocab']}, but its case's d2t targets {target_vocab} ids")
    if "d2t" in tensors:
        check_d2t(tensors["d2t"], logits_vocab, target_vocab)
    inputs = Inputs(
        case,
        tensors["hidden"],
        tensors["weight"],
        tensors.get("bias"),
        layouts,
        tensors.get("d2t"),
        target_vocab,
        tuple(record["applied"]),
        record["backend"],
        tensors.get("pad_weight"),
        tensors.get("pad_bias"),
    )
    return record, inputs


def _check_fields(record: dict[str, Any]) -> None:
    for name, kind in RECORD_FIELDS.items():
        value = record.get(name)
        if name not in record:
            raise ValueError(f"the field {name!r} is missing")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"the field {name!r} must be a JSON {kind.__name__}, got {shown(value)}")
    for name in TEXT_FIELDS:
        _check_text(name, record[name])
    for item in record["applied"]:
        _check_text("applied", item)
    if not isinstance(record.get("extra", {}), dict):
        raise ValueError(f"the field 'extra' must be a JSON object, got {shown(record['extra'])}")
    _check_env(record.get("env", {}))
    if not isinstance(record.get("created", ""), str):
        raise ValueError(f"the field 'created' must be a string, got {shown(record['created'])}")


ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
MAX_ENV = 8


def _check_env(env: object) -> None:
    """``env``: the settings of the environment variables its implementation reads, as names to values; a replay
    compares them with its own environment and sets nothing."""
    if not isinstance(env, dict) or len(env) > MAX_ENV:
        raise ValueError(f"the field 'env' must be a JSON object of at most {MAX_ENV} settings, got {shown(env)}")
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"the field 'env' names {shown(name)}, not an environment variable's name")
        if not (isinstance(value, str) and one_line(value) and len(value) <= 256):
            raise ValueError(f"the field 'env' sets {name} to {shown(value)}, not one short line of text")


def one_line(value: object) -> bool:
    """Text fit to print: one printable line, so a received file cannot write to the terminal as it likes."""
    return isinstance(value, str) and value.isprintable() and len(value) <= 4096


def _check_text(name: str, value: object) -> None:
    if not one_line(value):
        raise ValueError(f"the field {name!r} must be one printable line of text, got {shown(value)}")


def _int_list(name: str, value: object, low: int, high: int) -> list[int]:
    ok = isinstance(value, list) and value and all(type(v) is int and low <= v <= high for v in value)
    if not ok:
        raise ValueError(f"extra {name!r} must be a non-empty list of ints in [{low}, {high}], got {shown(value)}")
    return value


def _check_extra(extra: dict[str, Any], case: Case, logits_vocab: int) -> None:
    """What the recorded property replays with: each key that :func:`properties.repro.records.check` reads."""
    if "k" in extra and not (type(extra["k"]) is int and 1 <= extra["k"] <= logits_vocab):
        raise ValueError(f"extra 'k' must be an int from 1 to the case's vocabulary, got {shown(extra['k'])}")
    if "rows" in extra:
        _int_list("rows", extra["rows"], 0, case.batch - 1)
    if "tps" in extra:
        for tp in _int_list("tps", extra["tps"], 1, 64):
            try:
                replace(case, tp=tp)
            except ValueError as exc:
                raise ValueError(f"extra 'tps': {exc}") from None
    if "bad" in extra and not (isinstance(extra["bad"], str) and extra["bad"] in BAD_INPUTS):
        raise ValueError(f"extra 'bad' must be one of {tuple(BAD_INPUTS)}, got {shown(extra['bad'])}")
    if "argmax_impl" in extra:
        _check_text("argmax_impl", extra["argmax_impl"])
    if "sampling" in extra:
        try:
            plan_from_fields(extra["sampling"])
        except ValueError as exc:
            raise ValueError(f"extra 'sampling': {exc}") from None
    if "distribution" in extra and not (isinstance(extra["distribution"], str) and extra["distribution"] in BY_NAME):
        raise ValueError(f"extra 'distribution' must be one of {tuple(BY_NAME)}, got {shown(extra['distribution'])}")


def _tensors(path: Path, record: dict[str, Any], case: Case, logits_vocab: int) -> dict[str, torch.Tensor]:
    if "tensors" in record and "tensors_file" in record:
        raise ValueError(
            "it has both 'tensors' and 'tensors_file': a record holds its tensors inline or in a side file"
        )
    if "tensors" in record:
        if not isinstance(record["tensors"], dict):
            raise ValueError(f"the field 'tensors' must be a JSON object, got {shown(record['tensors'])}")
        tensors = {name: _decode(name, d) for name, d in record["tensors"].items()}
    elif "tensors_file" in record:
        tensors = _side_file(path, record["tensors_file"])
    else:
        raise ValueError("neither 'tensors' nor 'tensors_file' is there: the record holds no inputs")
    if record["format"] in OLD_FORMATS:  # every padding row was the same: keep one
        for name, pad in (("weight", "pad_weight"), ("bias", "pad_bias")):
            if name in tensors and tensors[name].ndim and tensors[name].shape[0] > case.vocab:
                tensors[pad] = tensors[name][case.vocab]
            if name in tensors and tensors[name].ndim:
                tensors[name] = tensors[name][: case.vocab]
    _check_shapes(tensors, case, logits_vocab)
    return tensors


def _decode(name: str, d: object) -> torch.Tensor:
    """An inline tensor: ``{"dtype", "shape", "hex"}`` with exactly the bytes that shape and dtype hold."""
    known = isinstance(d, dict) and isinstance(d.get("dtype"), str) and d["dtype"] in TENSOR_DTYPES
    if not known or not isinstance(d.get("hex"), str):
        raise ValueError(f"tensor {shown(name)} must be {{dtype: {tuple(TENSOR_DTYPES)}, shape, hex}}, got {shown(d)}")
    shape, dtype = d.get("shape"), TENSOR_DTYPES[d["dtype"]]
    if not isinstance(shape, list) or len(shape) > 2 or not all(type(n) is int and 0 <= n < 2**31 for n in shape):
        raise ValueError(f"tensor {shown(name)}: shape must be a list of at most 2 sizes, got {shown(shape)}")
    if len(d["hex"]) != 2 * math.prod(shape) * dtype.itemsize:
        raise ValueError(f"tensor {shown(name)}: {len(d['hex'])} hex digits do not hold a {d['dtype']} {shape}")
    try:
        raw = bytearray.fromhex(d["hex"])
    except ValueError:
        raise ValueError(f"tensor {shown(name)}: its bytes are not hex digits") from None
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(shape).clone()


def _side_file(path: Path, name: object) -> dict[str, torch.Tensor]:
    """The ``.pt`` file beside the record, loaded weights-only: tensors, never pickled code."""
    plain = isinstance(name, str) and name.endswith(".pt") and Path(name).name == name and "\\" not in name
    if not plain or name.startswith("."):  # no directory, no drive, no '..', no hidden file
        raise ValueError(f"'tensors_file' must be the name of a .pt file beside the record, got {shown(name)}")
    side = path.parent / name
    if not side.is_file():
        raise ValueError(f"'tensors_file' {name!r} is not beside the record")
    if side.resolve().parent != path.resolve().parent:
        raise ValueError(f"'tensors_file' {name!r} is a link that leads out of the record's directory")
    if side.stat().st_size > MAX_SIDE_BYTES:
        raise ValueError(f"'tensors_file' {name!r} is {side.stat().st_size} bytes: at most {MAX_SIDE_BYTES}")
    try:
        tensors = load_weights_only(side)
    except ValueError as exc:
        raise ValueError(f"'tensors_file' {name!r}: {exc}") from None
    if not isinstance(tensors, dict) or not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        raise ValueError(f"'tensors_file' {name!r} must hold a dict of tensors, got {type(tensors).__name__}")
    return tensors


def _check_shapes(tensors: dict[str, torch.Tensor], case: Case, logits_vocab: int) -> None:
    """Each tensor is the one the case builds: its dtype, its shape, and there exactly when the case has it."""
    dtype, rows = CASE_DTYPES[case.dtype], case.vocab + case.added
    want: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {
        "hidden": (dtype, (case.batch, case.hidden)),
        "weight": (dtype, (rows, case.hidden)),
        "pad_weight": (dtype, (case.hidden,)),
    }
    if case.bias:
        want |= {"bias": (dtype, (rows,)), "pad_bias": (dtype, ())}
    if case.d2t != "none" or "d2t" in tensors:  # a test's own table (the d2t flag's ties) beside a case of none
        want["d2t"] = (torch.int64, (logits_vocab,))
    for name, t in tensors.items():
        if name not in want:
            raise ValueError(f"tensor {shown(name)} is not one its case has (it has {', '.join(want)})")
        kind, shape = want[name]
        if t.layout != torch.strided or t.dtype != kind or tuple(t.shape) != shape:
            raise ValueError(f"tensor {name!r} is {t.dtype} {list(t.shape)}; its case builds {kind} {list(shape)}")
    missing = [name for name in want if name not in tensors and not name.startswith("pad_")]
    if missing:
        raise ValueError(f"tensor {missing[0]!r} is missing")
