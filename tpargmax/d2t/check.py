"""``tpargmax check-d2t``: is ``use_local_argmax_reduction`` safe for this draft's d2t table?

Exit 0 when it is safe and the tables agree with the draft's ``config.json``;
1 when the table is unsafe or invalid, or disagrees with the config or with
``--target-vocab``; 2 when the checkpoint cannot be read or has no ``d2t``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from reference.d2t import NON_MONOTONE, analyse_d2t
from tpargmax.d2t.checkpoint import CheckpointError, DraftTables, read_draft


@dataclass(frozen=True)
class Size:
    """A vocabulary size and the words saying where it came from."""

    value: int
    source: str


def config_size(tables: DraftTables, name: str) -> Size | None:
    """``name`` from config.json, top level or (speculators format) under ``transformer_layer_config``."""
    if tables.config is None:
        return None
    nested = tables.config.get("transformer_layer_config")
    for where, block in (("", tables.config), ("transformer_layer_config.", nested)):
        value = block.get(name) if isinstance(block, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return Size(value, f"{tables.config_path} {where}{name}")
    return None


def target_size(tables: DraftTables, given: int | None) -> Size | None:
    if given is not None:
        return Size(given, "--target-vocab")
    from_config = config_size(tables, "vocab_size")
    if from_config is not None:
        return from_config
    return None if tables.t2d is None else Size(tables.t2d.numel(), "t2d's length")


def mismatches(tables: DraftTables, target: Size | None) -> list[str]:
    """Each way the tables, the config and ``--target-vocab`` disagree, one sentence each."""
    found = []
    vocab, draft = config_size(tables, "vocab_size"), config_size(tables, "draft_vocab_size")
    if target is not None and vocab is not None and target.value != vocab.value:
        found.append(f"{target.source} is {target.value}, but {vocab.source} is {vocab.value}")
    if draft is not None and tables.d2t.numel() != draft.value:
        found.append(f"d2t has {tables.d2t.numel()} entries, but {draft.source} is {draft.value}")
    if tables.t2d is not None:
        for size in dict.fromkeys(s for s in (target, vocab) if s is not None):  # target may be vocab
            if tables.t2d.numel() != size.value:
                found.append(f"t2d has {tables.t2d.numel()} entries, but {size.source} is {size.value}")
        used = int(tables.t2d.to(bool).sum())
        if draft is not None and used != draft.value:
            found.append(f"t2d marks {used} targets as used, but {draft.source} is {draft.value}")
    return found


def check_d2t(args: argparse.Namespace) -> int:
    try:
        tables = read_draft(args.path)
        if tables.t2d is not None and tables.t2d.ndim != 1:
            raise CheckpointError(
                f"{tables.t2d_key!r} must be a 1-D mask over the target vocabulary, got {tuple(tables.t2d.shape)}"
            )
        target = target_size(tables, args.target_vocab)
        problems = mismatches(tables, target)
        t2d = tables.t2d if target is None or tables.t2d is None or tables.t2d.numel() == target.value else None
        report = analyse_d2t(tables.d2t, None if target is None else target.value, t2d)
    except (CheckpointError, ValueError) as exc:  # analyse_d2t names a d2t that is not 1-D integer offsets
        where = "" if isinstance(exc, CheckpointError) else f"{args.path}: "
        print(f"tpargmax check-d2t: {where}{exc}", file=sys.stderr)
        return 2
    finding = top_k_finding = None
    if report.kind == NON_MONOTONE:  # confirm by running the local path against the oracle
        import torch

        from properties.argmax.d2t_tables import check_tie, targets_of
        from sharded.impls import load_impl

        i, j = report.first_inversion[:2]
        target_vocab = report.target_vocab or int(targets_of(tables.d2t).max()) + 1
        d2t = tables.d2t.to(torch.int64)
        finding = check_tie(load_impl("vllm_pairs"), d2t, target_vocab, i, j)
        top_k_finding = check_tie(load_impl("topk_pairs"), d2t, target_vocab, i, j, k=2)
    safe = report.safe and not problems
    if args.json:
        found = (finding, top_k_finding)
        print(json.dumps(_as_json(args.path, tables, target, problems, report, found, safe), indent=2))
        return 0 if safe else 1
    t2d_words = f", t2d {tables.t2d_key!r} ({tables.t2d.numel()} targets)" if tables.t2d is not None else ", no t2d"
    target_words = f", target vocabulary {target.value} (from {target.source})" if target else ""
    print(f"{args.path}: d2t {tables.d2t_key!r} ({report.draft_vocab} draft ids){t2d_words}{target_words}")
    print(f"read: {', '.join(map(str, tables.files))}")
    for problem in problems:
        print(f"mismatch: {problem}")
    if t2d is None and tables.t2d is not None:
        print("t2d is left out of the classification: its length is not the target vocabulary")
    print(f"classification: {report.kind}")
    print(f"evidence: {report.evidence()}")
    if finding is not None:
        print(f"counterexample (vllm_pairs against the classic path): {finding}")
    if top_k_finding is not None:
        print(f"counterexample (topk_pairs, k=2, against the classic top-k): {top_k_finding}")
    because = " (the tables disagree with the config; see the mismatch lines)" if report.safe and problems else ""
    print(f"use_local_argmax_reduction: {'safe' if safe else 'NOT safe'} for this draft{because}")
    return 0 if safe else 1


def _as_json(path, tables, target, problems, report, found, safe) -> dict:
    return {
        "path": path,
        "files": [str(f) for f in tables.files],
        "d2t_key": tables.d2t_key,
        "t2d_key": tables.t2d_key,
        "config": None if tables.config_path is None else str(tables.config_path),
        "target_vocab_source": None if target is None else target.source,
        "mismatches": problems,
        **report.to_json(),
        "safe": safe,
        "counterexample": None if found[0] is None else vars(found[0]),
        "counterexample_top_k": None if found[1] is None else vars(found[1]),
    }
