"""A drawn case is structure (sizes, plans, a seed); tensors are built from it deterministically.

Hypothesis draws a :class:`Case`; :func:`properties.cases.tensors.build` turns it
into :class:`Inputs`: the head (its rows by global id, plus the row every padding
row holds), hidden states, bias and d2t, from a seeded ``torch.Generator``.  The
same ``Case`` repr rebuilds the same tensors anywhere, which is what replay relies on.
A case may come from someone else's text or file, so it checks its own fields.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields, replace
from functools import cached_property

import torch

from groups.devices import case_device, rank_device
from properties.cases.rank_inputs import DP_RULES, dp_counts, nudged
from reference.head import DEFAULT_PADDING_SIZE, SHARD_RULES, check_vocab, shard_widths
from sharded.layout import ShardLayout, uneven_layout, vocab_parallel_layout

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# ties, and two planted winners among the added ids: an added id tied with a base id on a later rank
# (rank order is not id order there), and an added id as the row's maximum
TIE_PLANS = (
    "within_shard",
    "across_ranks",
    "shard_boundary",
    "whole_row",
    "softcap_saturation",
    "added_tie",
    "added_max",
    "fp32_near_tie",  # two ids 2**-12 apart: float32 tells them apart, a TF32 matmul (10 mantissa bits) ties them
)
SPECIAL_PLANS = (
    "all_negative",
    "signed_zero",
    "subnormal",  # backgrounds: every other real logit is pushed down
    "nan_one_rank",
    "nan_ranks",
    "pos_inf",
    "neg_inf",
    "huge",
    "neg_inf_rows",
    "inf_at_ties",  # +inf on every id the tie plans planted: ties at +inf, across ranks and among added ids
)
PADDING_PLANS = ("zero", "above_max", "copy_max", "nan")
D2T_PLANS = ("none", "zeros", "eagle3")


@dataclass(frozen=True, repr=False)
class Case:
    """Everything that determines a test input; its repr (defaults left out) rebuilds it."""

    batch: int
    hidden: int
    vocab: int  # base ids (vLLM's org_vocab_size)
    tp: int
    added: int = 0  # added (LoRA) ids, global ids vocab .. vocab + added - 1
    padding_size: int = DEFAULT_PADDING_SIZE
    logits_vocab: int | None = None  # ids at or above it are not tokens; None: every id is
    dtype: str = "float32"
    seed: int = 0
    weights: str = "int"
    bias: bool = False
    scale: float = 1.0
    soft_cap: float | None = None
    ties: tuple[str, ...] = ()
    specials: tuple[str, ...] = ()
    padding: str = "zero"
    d2t: str = "none"
    target_extra: int = 0
    spread: bool = False  # a sampling case: few boosted rows, specials on a minority of rows (case_tensors.build)
    shards: str = "even"  # how the columns are cut: vLLM's even split, or an uneven rule (reference.head.SHARD_RULES)
    rank_ulps: int = 0  # ranks' copies of the hidden states differ by up to this many ulps (rank_inputs.nudged)
    dp: str = "none"  # attention data parallel: each rank owns a segment of the rows (rank_inputs.dp_counts)

    def __repr__(self) -> str:
        parts = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.default is MISSING or getattr(self, f.name) != f.default
        ]
        return f"Case({', '.join(parts)})"

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # Hypothesis's report uses the short repr too
        printer.text(repr(self))

    @property
    def logits_vocabulary(self) -> int:
        """L, the ids that are tokens (``0 .. L - 1``): ``logits_vocab``, or every row of the head when it is unset."""
        return self.logits_vocab or self.vocab + self.added

    def __post_init__(self) -> None:
        """A case may come from someone else's file or command line: every field is checked before any use."""
        for f in fields(self):
            what = _field_rule(f.name, getattr(self, f.name))
            if what:
                raise ValueError(f"Case field {f.name!r} must be {what}, got {shown(getattr(self, f.name))}")
        if self.specials and not self.bias:
            raise ValueError("Case field 'bias' must be True: special-value plans are planted through the bias")
        if self.rank_ulps and self.hidden < 4:
            raise ValueError("Case field 'hidden' must be at least 4 with rank_ulps: feature 3 carries tied ids' boost")
        if self.spread and self.hidden < SPREAD_HIDDEN:
            raise ValueError(
                f"Case field 'hidden' must be at least {SPREAD_HIDDEN} with spread=True: its last two features "
                "switch the special rows"
            )
        if self.shards == "even":
            check_vocab(self.vocab, self.added, self.padding_size, self.logits_vocabulary, self.tp)
        elif self.added or self.vocab < self.tp or self.logits_vocabulary > self.vocab:
            raise ValueError(
                f"Case field 'shards' {self.shards!r} cuts base ids only, at least one per rank: got vocab "
                f"{self.vocab}, added {self.added}, logits_vocab {self.logits_vocab}, tp {self.tp}"
            )
        if (self.vocab + self.added + 1) * self.hidden > MAX_ELEMENTS or self.batch * self.hidden > MAX_ELEMENTS:
            raise ValueError(
                f"Case fields 'vocab', 'added', 'batch' and 'hidden' make tensors of more than {MAX_ELEMENTS} "
                f"elements: head ({self.vocab} + {self.added} + 1) x {self.hidden}, hidden {self.batch} x {self.hidden}"
            )


# Sanity bounds on a case's sizes: far above what the strategies draw (vocabularies up to 262144, tp up to 8),
# and small enough that a case read from someone else's file cannot ask for more memory than a laptop has.
INT_BOUNDS = {
    "batch": (1, 4096),
    "hidden": (3, 65536),  # features 0 and 1 are the boost and -inf switches, so at least 3
    "vocab": (1, 2**21),
    "tp": (1, 64),
    "added": (0, 2**16),
    "padding_size": (1, 2**16),
    "logits_vocab": (1, 2**21 + 2**16),
    "seed": (0, 2**64 - 1),
    "target_extra": (0, 2**23),
    "rank_ulps": (0, 64),
}
SPREAD_HIDDEN = 5  # features 0-2 are the boost, -inf and near-tie features; the special rows' switches follow
MAX_ELEMENTS = 2**26  # in the head and in the hidden states: 256 MiB in float32
CHOICES = {
    "dtype": tuple(DTYPES),
    "weights": ("int", "normal"),
    "padding": PADDING_PLANS,
    "d2t": D2T_PLANS,
    "shards": SHARD_RULES,
    "dp": DP_RULES,
}
PLANS = {"ties": TIE_PLANS, "specials": SPECIAL_PLANS}


def _field_rule(name: str, value: object) -> str | None:
    """What ``value`` must be to serve as the field ``name`` (None: it is fine)."""
    if name in INT_BOUNDS and not (name == "logits_vocab" and value is None):
        low, high = INT_BOUNDS[name]
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        return None if ok else f"an int in [{low}, {high}]" + (" or None" if name == "logits_vocab" else "")
    if name in ("scale", "soft_cap") and not (name == "soft_cap" and value is None):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        return None if ok else "a finite number > 0" + (" or None" if name == "soft_cap" else "")
    if name in ("bias", "spread"):
        return None if isinstance(value, bool) else "True or False"
    if name in CHOICES:
        return None if isinstance(value, str) and value in CHOICES[name] else f"one of {CHOICES[name]}"
    if name in PLANS:
        ok = isinstance(value, tuple) and all(isinstance(p, str) and p in PLANS[name] for p in value)
        return None if ok else f"a tuple of plan names from {PLANS[name]}"
    return None


def shown(value: object, width: int = 60) -> str:
    """A value as one short line, whatever its size or content."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


TENSORS = ("hidden", "weight", "bias", "d2t", "pad_weight", "pad_bias")  # an Inputs' tensor fields


@dataclass(frozen=True)
class Inputs:
    """The built tensors of a case: the head's rows by global id, split for each rank by ``layouts``.

    ``weight`` and ``bias`` hold ids ``0 .. vocab + added - 1`` (base, then added), whatever the tp;
    every padding row holds ``pad_weight`` and ``pad_bias``.  Shards and the oracle's logits are computed
    once and kept (``replace`` starts afresh), so the tensors must not change after their first use.
    """

    case: Case
    hidden: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    layouts: tuple[ShardLayout, ...]
    d2t: torch.Tensor | None
    target_vocab: int
    applied: tuple[str, ...]
    backend: str = "sim"  # where the ranks run: see properties.harness.settings.BACKENDS
    pad_weight: torch.Tensor | None = None  # [H]; None: zeros
    pad_bias: torch.Tensor | None = None  # 0-d; None: zero
    device: str = "cpu"  # cpu or cuda: the tensors live on case_device(device), rank r's on rank_device(device, r)

    @property
    def tp(self) -> int:
        return len(self.layouts)

    @property
    def vocab(self) -> int:
        """The logits vocabulary: token ids are ``0 .. vocab - 1``."""
        return self.layouts[0].vocab

    def _rows(self, rank: int, full: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        lay = self.layouts[rank]
        base_pad, added_pad = lay.added_row - lay.base_real, lay.size - lay.added_row - lay.added_real
        parts = (
            full[lay.start : lay.start + lay.base_real],
            pad.expand(base_pad, *pad.shape),
            full[lay.added_start : lay.added_start + lay.added_real],
            pad.expand(added_pad, *pad.shape),
        )
        return torch.cat(parts)

    @cached_property
    def _shards(self) -> tuple[tuple[torch.Tensor, torch.Tensor | None], ...]:
        """Every rank's (weight, bias) shard, assembled once: the ranks' arguments and the oracle both read them."""
        pad_weight = self.pad_weight if self.pad_weight is not None else self.weight.new_zeros(self.weight.shape[1])
        shards = []
        for rank in range(self.tp):
            where = rank_device(self.device, rank)
            bias = None
            if self.bias is not None:
                pad_bias = self.pad_bias if self.pad_bias is not None else self.bias.new_zeros(())
                bias = self._rows(rank, self.bias, pad_bias).to(where)
            shards.append((self._rows(rank, self.weight, pad_weight).to(where), bias))
        return tuple(shards)

    @cached_property
    def memo(self) -> dict[str, torch.Tensor]:
        """Results derived from these tensors (the oracle's logits), computed once per Inputs."""
        return {}

    @cached_property
    def rank_hidden(self) -> tuple[torch.Tensor, ...]:
        """Every rank's copy of the hidden states: the case's, a few ulps apart where ``rank_ulps`` says so."""
        return tuple(nudged(self.hidden, self.case.seed, r, self.case.rank_ulps) for r in range(self.tp))

    @property
    def dp_rows(self) -> tuple[int, ...] | None:
        """Each rank's row count under attention data parallel, or None (every rank holds every row)."""
        case = self.case
        return None if case.dp == "none" else dp_counts(case.batch, self.tp, case.dp, case.seed)

    def weight_shard(self, rank: int) -> torch.Tensor:
        """Rank ``rank``'s head shard, padding included, on that rank's device.

        Shared by every caller, so never written to: whoever hands it to an implementation copies it first.
        """
        return self._shards[rank][0]

    def bias_shard(self, rank: int) -> torch.Tensor | None:
        """Rank ``rank``'s bias shard, like :meth:`weight_shard`; None without a bias."""
        return self._shards[rank][1]

    def on(self, device: str) -> Inputs:
        """The same tensors on ``device`` (``cpu`` or ``cuda``); cases are built on the CPU and moved here."""
        where = case_device(device)
        moved = {name: None if getattr(self, name) is None else getattr(self, name).to(where) for name in TENSORS}
        return replace(self, **moved, device=device)

    def with_tp(self, tp: int) -> Inputs:
        """The same head, split for another tp."""
        case = replace(self.case, tp=tp)
        return replace(self, layouts=layouts_of(case), case=case)

    def with_rows(self, rows: list[int]) -> Inputs:
        return replace(self, hidden=self.hidden[rows].clone(), case=replace(self.case, batch=len(rows)))


def layouts_of(case: Case) -> tuple[ShardLayout, ...]:
    if case.shards != "even":
        widths = shard_widths(case.vocab, case.tp, case.shards, case.seed)
        return uneven_layout(case.vocab, widths, logits_vocab=case.logits_vocab)
    return vocab_parallel_layout(
        case.vocab, case.tp, added_vocab=case.added, padding_size=case.padding_size, logits_vocab=case.logits_vocab
    )
