"""Draft checkpoints with d2t tables, built the way EAGLE3 training code builds them, and corrupted copies.

Regenerate with ``python -m tests.d2t_fixtures``; tests/test_check_d2t.py checks that
the stored files are exactly what this module builds.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from engines.safetensors_file import save

HERE = Path(__file__).resolve().parent / "fixtures" / "d2t"
CORPUS = (
    "A draft model proposes tokens and the target model checks them. The draft's head covers only the "
    "tokens it saw most often, and a table maps each draft id to its target id. When the table keeps the "
    "order of the target ids, the fast local argmax and the full gather agree on every token; when it does "
    "not, a single tie between two swapped entries is enough to tell them apart."
)
TARGET_VOCAB = 256  # byte-level target ids
DRAFT_VOCAB = 24


def eagle3_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """Count token frequencies, keep the top N, sort the used ids: ``d2t[i] = used[i] - i``, t2d = membership."""
    counts = Counter(CORPUS.encode())
    top = sorted(counts, key=lambda t: (-counts[t], t))[:DRAFT_VOCAB]
    used = torch.tensor(sorted(top), dtype=torch.int64)
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[used] = True
    return used - torch.arange(DRAFT_VOCAB), t2d


def corrupted() -> dict[str, dict[str, torch.Tensor]]:
    """file name -> tensors: the good table, and copies each broken one way."""
    d2t, t2d = eagle3_tables()
    targets = torch.arange(DRAFT_VOCAB) + d2t
    swapped, duplicate, out_of_range = targets.clone(), targets.clone(), targets.clone()
    swapped[[5, 17]] = swapped[[17, 5]]
    duplicate[12] = duplicate[13]
    out_of_range[-1] = TARGET_VOCAB + 7
    bad_t2d = t2d.clone()
    bad_t2d[int((~t2d).nonzero()[3])] = True  # a target t2d calls used, though no draft id maps to it
    offsets = lambda t: t - torch.arange(DRAFT_VOCAB)  # noqa: E731
    return {
        "eagle3.safetensors": {"d2t": d2t, "t2d": t2d},
        "swapped.safetensors": {"d2t": offsets(swapped), "t2d": t2d},
        "duplicate.safetensors": {"d2t": offsets(duplicate), "t2d": t2d},
        "out_of_range.safetensors": {"d2t": offsets(out_of_range), "t2d": t2d},
        "t2d_mismatch.safetensors": {"d2t": d2t, "t2d": bad_t2d},
        "prefixed.safetensors": {"model.d2t": d2t, "model.t2d": t2d, "model.fc.weight": torch.zeros(2, 2)},
        "no_d2t.safetensors": {"fc.weight": torch.zeros(2, 2)},
    }


def save_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    save(tensors, path)


FORMS = ("safetensors", "shards", "bin")  # model.safetensors; a 2-shard index; pytorch_model.bin


def write_draft(
    directory: Path, tables: dict[str, torch.Tensor], weights: dict[str, torch.Tensor], form: str, config: dict | None
) -> Path:
    """A draft directory as published. ``shards`` splits the weights over two files and puts the tables in
    the second, as a Hugging Face index does with tensors saved last."""
    directory.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    if form == "safetensors":
        save_safetensors(directory / "model.safetensors", {**weights, **tables})
    elif form == "bin":
        torch.save({**weights, **tables}, directory / "pytorch_model.bin")
    elif form == "shards":
        names = list(weights)
        first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
        parts = {first: names[: len(names) // 2], second: names[len(names) // 2 :]}
        save_safetensors(directory / first, {n: weights[n] for n in parts[first]})
        save_safetensors(directory / second, {**{n: weights[n] for n in parts[second]}, **tables})
        weight_map = {n: shard for shard, ns in parts.items() for n in ns} | dict.fromkeys(tables, second)
        index = {"metadata": {"total_size": sum(f.stat().st_size for f in directory.glob("*.safetensors"))}}
        (directory / "model.safetensors.index.json").write_text(json.dumps({**index, "weight_map": weight_map}))
    else:
        raise ValueError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    return directory


def write_all(directory: Path = HERE) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, tensors in corrupted().items():
        save_safetensors(directory / name, tensors)
        paths.append(directory / name)
    d2t, t2d = eagle3_tables()
    state = directory / "state_dict.pt"
    torch.save({"state_dict": {"draft.d2t": d2t, "draft.t2d": t2d}}, state)
    return [*paths, state]


if __name__ == "__main__":
    for path in write_all():
        print(path)
