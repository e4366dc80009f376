"""Find and read a draft's ``d2t``/``t2d`` tables in what people download, touching nothing else.

A path may be a ``.safetensors`` file, a torch file, a shard index
(``*.index.json``) or a directory holding one of those beside ``config.json``.
Safetensors files are memory-mapped through the ``safetensors`` library and only
the two tables are read; torch files are loaded weights-only and memory-mapped
(:mod:`properties.repro.torch_files`), so a pickled object is refused, never run; an
index opens only the shard(s) that hold the tables. Every failure is a
:class:`CheckpointError` whose message is one line naming the file and the fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from properties.repro.torch_files import first_line, load_weights_only

# What a published draft directory holds, in the order engines look for them.
DIRECTORY_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# The library's words for a damaged file, and what they mean to someone who downloaded it.
SAFETENSORS_FAULTS = {
    "file not fully covered": "its header's tensor offsets do not end where the file ends "
    "(a truncated download, or offsets outside the file)",
    "invalid shape, data type, or offset": "a tensor's offsets do not fit its shape or lie outside the file",
    "invalid JSON": "its header is not JSON",
    "header too small": "too short for a safetensors file",
    "header too large": "its header length does not fit the file (not a safetensors file?)",
    "invalid header length": "its header length does not fit the file (truncated?)",
}


class CheckpointError(Exception):
    """The checkpoint cannot be read, or lacks what is asked of it; the message says which, in one line."""


@dataclass(frozen=True)
class DraftTables:
    """The tables found, where they came from, and the draft's ``config.json`` if one sits beside them."""

    d2t: torch.Tensor
    t2d: torch.Tensor | None
    d2t_key: str
    t2d_key: str | None
    files: tuple[Path, ...]  # the files actually opened
    config: dict | None
    config_path: Path | None


def read_draft(path: str | Path) -> DraftTables:
    """Resolve ``path`` to the file(s) holding d2t/t2d and read just those two tensors."""
    path = Path(path)
    if path.is_dir():
        path = _checkpoint_in(path)
    elif not path.is_file():
        hub_id = len(path.parts) == 2 and not str(path).startswith((".", "/", "~"))
        hint = f"; a Hugging Face id? download it first: hf download {path} --local-dir DIR" if hub_id else ""
        raise CheckpointError(f"{path}: no such file or directory{hint}")
    if path.name.endswith(".index.json"):
        shard_of = _index(path)
        d2t_key, t2d_key = _table_keys(shard_of)
        wanted = [k for k in (d2t_key, t2d_key) if k is not None]
        opened, tensors = tuple(dict.fromkeys(shard_of[k] for k in wanted)), {}
        for shard in opened:  # each shard that holds a table, opened once
            with _opened(shard) as (names, get):
                for key in (k for k in wanted if shard_of[k] == shard):
                    if key not in names:
                        raise CheckpointError(
                            f"{shard}: the index puts {key!r} in this shard, but the shard has no such tensor"
                        )
                    tensors[key] = get(key)
    else:
        with _opened(path) as (names, get):
            d2t_key, t2d_key = _table_keys(names)
            tensors = {k: get(k) for k in (d2t_key, t2d_key) if k is not None}
        opened = (path,)
    t2d = None if t2d_key is None else tensors[t2d_key]
    return DraftTables(tensors[d2t_key], t2d, d2t_key, t2d_key, opened, *_config(path.parent / "config.json"))


def _table_keys(names: Iterable[str]) -> tuple[str, str | None]:
    names = list(names)
    return find_key(names, "d2t", required=True), find_key(names, "t2d", required=False)


def find_key(keys: list[str], name: str, required: bool) -> str | None:
    """The one key named ``name`` or ending in ``.name`` (a module prefix)."""
    hits = sorted(k for k in keys if k == name or k.endswith("." + name))
    if len(hits) > 1:
        raise CheckpointError(f"several tensors could be {name!r}: {', '.join(hits)}")
    if not hits and required:
        shown = ", ".join(sorted(keys)[:8]) + (" ..." if len(keys) > 8 else "")
        raise CheckpointError(
            f"no {name!r} tensor (EAGLE3 drafts store one, maybe under a module prefix); the checkpoint has: {shown}"
        )
    return hits[0] if hits else None


def _checkpoint_in(directory: Path) -> Path:
    for name in DIRECTORY_FILES:
        if (directory / name).is_file():
            return directory / name
    singles = sorted(directory.glob("*.safetensors"))
    if len(singles) == 1:
        return singles[0]
    present = ", ".join(sorted(p.name for p in directory.iterdir())[:8]) or "nothing"
    raise CheckpointError(
        f"{directory}: no checkpoint in this directory (looked for {', '.join(DIRECTORY_FILES)} "
        f"or a single *.safetensors file); it holds: {present}"
    )


def _is_safetensors(path: Path) -> bool:
    if path.suffix == ".safetensors":
        return True
    with path.open("rb") as fh:
        head = fh.read(9)
    return len(head) == 9 and head[8:9] == b"{"


@contextmanager
def _opened(path: Path) -> Iterator[tuple[set[str], Callable[[str], torch.Tensor]]]:
    """The file's tensor names, and a reader of one tensor copied off the memory map (the file may change later)."""
    if not _is_safetensors(path):
        tensors = _torch_tensors(path)
        yield set(tensors), lambda key: tensors[key].clone()
        return
    with _safe_open(path) as fh:

        def get(key: str) -> torch.Tensor:
            try:
                return fh.get_tensor(key)
            except Exception as exc:  # noqa: BLE001 - a damaged tensor entry is "cannot read", reported plainly
                raise CheckpointError(f"{path}: cannot read {key!r}: {first_line(exc)}") from None

        yield set(fh.keys()), get


def _safe_open(path: Path):
    from safetensors import safe_open

    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as exc:  # noqa: BLE001 - SafetensorError and OSError alike become one line
        text = first_line(exc)
        reason = next((why for words, why in SAFETENSORS_FAULTS.items() if words in text), None)
        raise CheckpointError(
            f"{path}: not a readable safetensors file: {reason or text}" + (f" ({text})" if reason else "")
        ) from None


def _torch_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a torch file by dotted name, memory-mapped where the format allows it."""
    try:
        obj = load_weights_only(path, mmap=True)
    except ValueError as exc:
        raise CheckpointError(f"{path}: neither safetensors nor a torch state dict ({exc})") from None
    tensors = _flatten(obj)
    if not tensors:
        raise CheckpointError(f"{path}: a torch file, but it holds no tensors (got {type(obj).__name__})")
    return tensors


def _flatten(obj: object, prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.update(_flatten(value, f"{prefix}{key}."))
    elif isinstance(obj, torch.Tensor):
        out[prefix[:-1]] = obj
    return out


def _index(path: Path) -> dict[str, Path]:
    """A shard index's tensor -> shard file map; every shard it names must exist (none is opened here)."""
    data = _json(path, "shard index")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{path}: not a shard index (no 'weight_map' of tensor name -> shard file)")
    for shard in sorted(set(weight_map.values())):
        if path.parent.resolve() not in (path.parent / shard).resolve().parents:  # absolute, '..' or a link out
            raise CheckpointError(f"{path}: names shard {shard!r}, outside its directory; only shards in it are read")
        if not (path.parent / shard).is_file():
            where = path.parent
            raise CheckpointError(f"{path}: names shard {shard!r}, which is not in {where} (incomplete download?)")
    return {key: path.parent / shard for key, shard in weight_map.items()}


def _config(path: Path) -> tuple[dict | None, Path | None]:
    if not path.is_file():
        return None, None
    data = _json(path, "config")
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: a config must be a JSON object, got {type(data).__name__}")
    return data, path


def _json(path: Path, what: str) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: the {what} is not readable JSON ({first_line(exc)})") from None
