"""A drawn case is structure (sizes, plans, a seed); tensors are built from it deterministically.

Hypothesis draws a :class:`Case`; :func:`build` turns it into the full padded
head, hidden states, bias and d2t with a seeded ``torch.Generator``.  The same
``Case`` repr rebuilds the same tensors anywhere, which is what replay relies on.

Planted structure, and why it is exact:

* ``int`` weights and hidden states are small integers, so every dot product is
  exact in fp32 and copied weight rows give bit-identical logits (real ties).
* Feature 0 of the hidden state is a per-row "boost" switch (0 or 2); planted
  ids get weight 256 there, so on boosted rows they beat every other logit.
* Feature 1 is the "-inf row" switch: every weight row has -1 there, so a
  hidden value of +inf makes the whole row ``-inf``.
* Special values go through the bias, planted after the cast to the dtype.
"""

from __future__ import annotations

import random
from dataclasses import MISSING, dataclass, fields, replace

import torch

from sharded.layout import ShardLayout, vocab_parallel_layout

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TIE_PLANS = ("within_shard", "across_ranks", "shard_boundary", "whole_row", "softcap_saturation")
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
)
PADDING_PLANS = ("zero", "above_max", "copy_max", "nan")
D2T_PLANS = ("none", "zeros", "eagle3")
BOOST = 256.0
LOW = -1024.0


@dataclass(frozen=True, repr=False)
class Case:
    """Everything that determines a test input; its repr (defaults left out) rebuilds it."""

    batch: int
    hidden: int
    vocab: int
    tp: int
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

    def __repr__(self) -> str:
        parts = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.default is MISSING or getattr(self, f.name) != f.default
        ]
        return f"Case({', '.join(parts)})"

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # Hypothesis's report uses the short repr too
        printer.text(repr(self))

    def __post_init__(self) -> None:
        if self.hidden < 3:
            raise ValueError("hidden must be >= 3: features 0 and 1 are the boost and -inf switches")
        if self.specials and not self.bias:
            raise ValueError("special-value plans are planted through the bias: set bias=True")
        for name, value, allowed in (
            ("dtype", self.dtype, DTYPES),
            ("weights", self.weights, ("int", "normal")),
            ("padding", self.padding, PADDING_PLANS),
            ("d2t", self.d2t, D2T_PLANS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
        unknown = set(self.ties) - set(TIE_PLANS) | set(self.specials) - set(SPECIAL_PLANS)
        if unknown:
            raise ValueError(f"unknown plans {sorted(unknown)}")


@dataclass(frozen=True)
class Inputs:
    """The built tensors of a case: the full padded head, split by ``layouts``."""

    case: Case
    hidden: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    layouts: tuple[ShardLayout, ...]
    d2t: torch.Tensor | None
    target_vocab: int
    applied: tuple[str, ...]
    backend: str = "sim"  # where the ranks run: see properties.runner.BACKENDS

    @property
    def tp(self) -> int:
        return len(self.layouts)

    def weight_shard(self, rank: int) -> torch.Tensor:
        lay = self.layouts[rank]
        return self.weight[lay.start : lay.end]

    def bias_shard(self, rank: int) -> torch.Tensor | None:
        lay = self.layouts[rank]
        return None if self.bias is None else self.bias[lay.start : lay.end]

    def with_tp(self, tp: int) -> Inputs:
        """The same full head, split for another tp."""
        return replace(self, layouts=vocab_parallel_layout(self.case.vocab, tp), case=replace(self.case, tp=tp))

    def with_rows(self, rows: list[int]) -> Inputs:
        return replace(self, hidden=self.hidden[rows].clone(), case=replace(self.case, batch=len(rows)))


def _ids(rng: random.Random, lay: ShardLayout, k: int) -> list[int]:
    return sorted(rng.sample(range(lay.start, lay.start + lay.num_real), min(k, lay.num_real)))


def _tie_ids(plan: str, rng: random.Random, real: list[ShardLayout]) -> list[int]:
    if plan == "within_shard":
        wide = [lay for lay in real if lay.num_real >= 2]
        return _ids(rng, rng.choice(wide), rng.randint(2, 3)) if wide else []
    if plan == "across_ranks" and len(real) >= 2:
        return [
            _ids(rng, lay, 1)[0] for lay in sorted(rng.sample(real, rng.randint(2, len(real))), key=lambda x: x.rank)
        ]
    if plan == "shard_boundary" and len(real) >= 2:
        r = rng.randrange(len(real) - 1)
        return [real[r + 1].start - 1, real[r + 1].start]
    if plan == "softcap_saturation":
        lay = rng.choice(real)
        return _ids(rng, lay, rng.randint(2, 4))
    return []


def _spread(rng: random.Random, real: list[ShardLayout], k: int) -> list[int]:
    """k real ids, each from a random rank."""
    return sorted({_ids(rng, rng.choice(real), 1)[0] for _ in range(k)})


def build(case: Case) -> Inputs:
    """Deterministically build the tensors of ``case`` (same case, same bits)."""
    g = torch.Generator().manual_seed(case.seed)
    rng = random.Random(case.seed)
    layouts = vocab_parallel_layout(case.vocab, case.tp)
    padded, vocab, batch, hsize = layouts[0].padded_vocab, case.vocab, case.batch, case.hidden
    real = [lay for lay in layouts if lay.num_real]
    if case.weights == "int":
        hidden = torch.randint(-3, 4, (batch, hsize), generator=g).float()
        weight = torch.randint(-3, 4, (padded, hsize), generator=g, dtype=torch.int8).float()
        bias = torch.randint(-3, 4, (padded,), generator=g).float() if case.bias else None
    else:
        hidden = torch.randn(batch, hsize, generator=g)
        weight = torch.randn(padded, hsize, generator=g)
        bias = torch.randn(padded, generator=g) if case.bias else None
    hidden[:, 0] = torch.where(torch.rand(batch, generator=g) < 0.75, 2.0, 0.0)
    hidden[:, 1] = 0.0
    weight[:, 0] = 0.0
    weight[:, 1] = -1.0
    applied: list[str] = []

    anchor = _ids(rng, rng.choice(real), 1)[0]
    for plan in case.ties:
        if plan == "whole_row":
            weight[:vocab] = weight[anchor].clone()
            if bias is not None:
                bias[:vocab] = float(bias[anchor])
            applied.append(plan)
            continue
        ids = _tie_ids(plan, rng, real)
        if not ids:
            continue
        weight[ids] = weight[ids[0]].clone()
        weight[ids, 0] = BOOST
        if bias is not None:
            bias[ids] = float(bias[ids[0]])
        if plan == "softcap_saturation":  # distinct pre-cap logits that tanh flattens to one value
            weight[ids, 0] = torch.tensor([BOOST * (1 + i / 8) for i in rng.sample(range(len(ids)), len(ids))])
        anchor = ids[0]
        applied.append(plan)
    if not case.ties:
        weight[anchor, 0] = BOOST

    dtype = DTYPES[case.dtype]
    hidden, weight = hidden.to(dtype), weight.to(dtype)
    bias = None if bias is None else bias.to(dtype)
    _plant_specials(case, rng, real, vocab, batch, hidden, weight, bias, applied)
    _plant_padding(case, anchor, vocab, weight, bias, applied)
    d2t, target_vocab = _d2t(case, g)
    return Inputs(case, hidden, weight, bias, layouts, d2t, target_vocab, tuple(applied))


def _plant_specials(case, rng, real, vocab, batch, hidden, weight, bias, applied) -> None:
    tiny = torch.finfo(weight.dtype).smallest_normal * torch.finfo(weight.dtype).eps  # least subnormal
    background: dict[int, float] = {}
    for plan in case.specials:
        if plan == "signed_zero":  # +-tiny underflows to +-0 under the case's scale of 0.5
            for i in _spread(rng, real, rng.randint(2, 4)):
                background[i] = rng.choice((tiny, -tiny))
        elif plan == "subnormal":
            for i in _spread(rng, real, rng.randint(2, 4)):
                background[i] = tiny * rng.randint(1, 3)
    if background or "all_negative" in case.specials:
        bias[:vocab] = LOW
        for i, value in background.items():
            weight[i] = 0.0
            bias[i] = value
        applied.extend(p for p in ("all_negative", "signed_zero", "subnormal") if p in case.specials)
    nan = float("nan")
    huge = torch.finfo(weight.dtype).max
    for plan in case.specials:
        if plan == "nan_one_rank":
            lay = rng.choice(real)
            ids = _ids(rng, lay, rng.randint(1, 2))
        elif plan == "nan_ranks":
            ids = _spread(rng, real, rng.randint(2, 4))
        elif plan in ("pos_inf", "neg_inf", "huge"):
            ids = _spread(rng, real, rng.randint(1, 3))
        elif plan == "neg_inf_rows":
            rows = sorted(rng.sample(range(batch), rng.randint(1, batch)))
            hidden[rows, 1] = float("inf")
            applied.append(plan)
            continue
        else:
            continue
        for i in ids:
            if plan.startswith("nan"):
                bias[i] = rng.choice((nan, -nan))
            elif plan == "huge":
                bias[i] = rng.choice((1, -1)) * huge * rng.uniform(0.5, 1.0)
            else:
                bias[i] = float("inf") if plan == "pos_inf" else float("-inf")
        applied.append(plan)


def _plant_padding(case, anchor, vocab, weight, bias, applied) -> None:
    if weight.shape[0] == vocab:
        return
    pad = slice(vocab, None)
    if case.padding == "zero":
        weight[pad] = 0.0
        if bias is not None:
            bias[pad] = 0.0
    elif case.padding == "nan":
        weight[pad] = float("nan")
    else:
        weight[pad] = weight[anchor].clone()
        weight[pad, 1] = 0.0  # padding stays finite on -inf rows
        if bias is not None:
            bias[pad] = float(bias[anchor])
        if case.padding == "above_max":
            weight[pad, 0] = 2 * BOOST
            if bias is not None:
                bias[pad] = 2 * BOOST
    applied.append(f"padding_{case.padding}")


def _d2t(case: Case, g: torch.Generator) -> tuple[torch.Tensor | None, int]:
    vocab = case.vocab
    target_vocab = vocab + case.target_extra
    if case.d2t == "none":
        return None, vocab
    if case.d2t == "zeros":
        return torch.zeros(vocab, dtype=torch.int64), target_vocab
    return eagle3_d2t(vocab, target_vocab, g), target_vocab


def eagle3_d2t(vocab: int, target_vocab: int, g: torch.Generator) -> torch.Tensor:
    """As EAGLE3 training code builds it: the sorted set of used target ids, ``d2t[i] = used[i] - i``."""
    used = torch.randperm(target_vocab, generator=g)[:vocab].sort().values
    return used - torch.arange(vocab)
