"""Read d2t/t2d tables from a draft checkpoint: safetensors (parsed here, no NumPy) or a torch state dict."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

SAFETENSORS_DTYPES = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
}


class CheckpointError(Exception):
    """The file cannot be read, or lacks what is asked of it; the message says which."""


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    data = path.read_bytes()
    if len(data) < 8:
        raise CheckpointError(f"{path}: too short for a safetensors file ({len(data)} bytes)")
    (size,) = struct.unpack("<Q", data[:8])
    if not 2 <= size <= len(data) - 8:
        raise CheckpointError(f"{path}: not a safetensors file (header length {size} does not fit the file)")
    try:
        header = json.loads(data[8 : 8 + size])
    except ValueError as exc:
        raise CheckpointError(f"{path}: safetensors header is not JSON ({exc})") from None
    body, tensors = data[8 + size :], {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            begin, end = info["data_offsets"]
            shape = info["shape"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor {name!r} has an unreadable header entry {info!r}") from None
        if not 0 <= begin <= end <= len(body):
            raise CheckpointError(f"{path}: tensor {name!r} lies outside the file (bytes {begin}..{end})")
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(shape)
    return tensors


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """A minimal writer (contiguous, little-endian), for the tests' fixtures."""
    codes = {v: k for k, v in SAFETENSORS_DTYPES.items()}
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = bytes(t.view(torch.uint8).reshape(-1).tolist()) if t.numel() else b""
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def _flatten(obj: object, prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.update(_flatten(value, f"{prefix}{key}."))
    elif isinstance(obj, torch.Tensor):
        out[prefix[:-1]] = obj
    return out


def read_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor in the file by dotted name: safetensors, else a (possibly nested) torch state dict."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    with path.open("rb") as fh:
        head = fh.read(9)
    if len(head) == 9 and head[8:9] == b"{":
        return read_safetensors(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any load failure is "cannot read", reported plainly
        raise CheckpointError(
            f"{path}: neither safetensors nor a torch state dict ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    tensors = _flatten(obj)
    if not tensors:
        raise CheckpointError(f"{path}: a torch file, but it holds no tensors (got {type(obj).__name__})")
    return tensors


def find_key(tensors: dict[str, torch.Tensor], name: str, required: bool) -> str | None:
    """The one key named ``name`` or ending in ``.name`` (a module prefix)."""
    hits = sorted(k for k in tensors if k == name or k.endswith("." + name))
    if len(hits) > 1:
        raise CheckpointError(f"several tensors could be {name!r}: {', '.join(hits)}")
    if not hits and required:
        shown = ", ".join(sorted(tensors)[:8]) + (" ..." if len(tensors) > 8 else "")
        raise CheckpointError(
            f"no {name!r} tensor (EAGLE3 drafts store one, maybe under a module prefix); the file has: {shown}"
        )
    return hits[0] if hits else None
