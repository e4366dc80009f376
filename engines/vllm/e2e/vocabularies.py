"""The two tokenizers of a draft with a vocabulary of its own (vLLM's ``use_heterogeneous_vocab``), and the oracle's
reading of them.

vLLM 0.32.0 and 0.33.0 let a ``draft_model`` draft keep its own tokenizer: the tokens both vocabularies hold, once a
word-initial space marker (``Ġ``, ``▁``) is read as a space, are shared; the draft's logits are constrained to them,
its argmax is mapped to the target's id, and the target's tokens are mapped back to the draft's (a token the draft
lacks to its unknown token).  The suite writes both tokenizers (word-level, ``tokenizer.json``), one plan for every
example of a run, since an engine reads them once, at start:

- id 0 is ``[UNK]`` in both, shared;
- one draft id in seven (``d % 7 == 6``) is a word the target lacks: among them rows the planted cases use at the tp 2
  shard boundary (a ``+inf`` row, a row tied across ranks, a row tied within a shard), none of the rows
  ``winners_across_ids`` walks;
- the rest map to target ids drawn at random, in the draft's order (as trained drafts' tables run, and as an exact
  draft needs: among tied logits both heads take the lowest id, so the two orders must agree);
- half the shared words carry the space marker, ``Ġ`` in the target and ``▁`` in the draft.

:func:`draft_to_target` reads the shared tokens back from the words, as vLLM's contract says, not from the plan.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from engines.vllm.e2e.scenario import SIZES

UNK = "[UNK]"
SPACE_MARKERS = ("Ġ", "▁")  # BPE's and SentencePiece's word-initial space
SEED = 38174  # the plan's own: the same tokenizers in every engine and run


@functools.cache
def words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The target's and the draft's word for each id."""
    v, dv = SIZES.vocab, SIZES.draft_vocab
    own = [d for d in range(1, dv) if d % 7 == 6]
    picked = torch.randperm(v - 1, generator=torch.Generator().manual_seed(SEED))[: dv - 1 - len(own)] + 1
    targets = iter(picked.sort().values.tolist())
    target, draft = [UNK] + [f"w{t}" for t in range(1, v)], [UNK]
    for d in range(1, dv):
        if d % 7 == 6:
            draft.append(f"draft{d}")
            continue
        t = next(targets)
        if d % 2:
            target[t] = f"Ġw{t}"
            draft.append(f"▁w{t}")
        else:
            draft.append(f"w{t}")
    return tuple(target), tuple(draft)


def _normalised(word: str) -> str:
    return " " + word[1:] if word[:1] in SPACE_MARKERS else word


@functools.cache
def _draft_to_target() -> torch.Tensor:
    target, draft = words()
    ids = {}
    for t, word in enumerate(target):
        ids.setdefault(_normalised(word), t)
    return torch.tensor([ids.get(_normalised(word), -1) for word in draft])


def draft_to_target() -> torch.Tensor:
    """``[draft vocab]``: the target id of each draft id's word, -1 where the target lacks it."""
    return _draft_to_target().clone()


def target_unk() -> int:
    """Where a draft pick outside the shared tokens would go: the target's unknown token."""
    return words()[0].index(UNK)


def tokenizer_json(vocabulary: tuple[str, ...]) -> str:
    """A word-level ``tokenizer.json``: each word its id, words split on whitespace, ``[UNK]`` for the rest."""
    model = {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(vocabulary)}, "unk_token": UNK}
    return json.dumps(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [],
            "normalizer": None,
            "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": None,
            "decoder": None,
            "model": model,
        },
        ensure_ascii=False,
    )


def write_tokenizer(folder: Path, role: str) -> None:
    """``role``'s tokenizer (``"target"`` or ``"draft"``) into a model's folder."""
    vocabulary = words()[("target", "draft").index(role)]
    (folder / "tokenizer.json").write_text(tokenizer_json(vocabulary), encoding="utf-8")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": UNK, "model_max_length": SIZES.max_len}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
