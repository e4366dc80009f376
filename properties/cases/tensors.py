"""The tensors of a case, built deterministically from its seed, with ties, special values and traps planted.

Planted structure, and why it is exact:

* ``int`` weights and hidden states are small integers, so every dot product is
  exact in fp32 and copied weight rows give bit-identical logits (real ties).
* Feature 0 of the hidden state is a per-row "boost" switch (0 or 2); planted
  ids get weight 256 there, so on boosted rows they beat every other logit.
* Feature 1 is the "-inf row" switch: every weight row has -1 there, so a
  hidden value of +inf makes the whole row ``-inf``.
* Special values go through the bias, planted after the cast to the dtype.  In a ``spread`` case (the sampling
  properties' cases) the NaN, infinity and huge plans go instead through the last two features, which only a
  minority of rows switch on: the next to last holds :data:`SWITCH` there, and a planted id's weight on it is the
  dtype's largest value (its product overflows to ``±inf`` whatever the matmul's order) or the huge value over
  :data:`SWITCH`; every other id's is 0.  A NaN plan makes the first half of those rows NaN through the last
  feature of the hidden state: a NaN at one id among finite ones would need ``inf - inf``, which a fused
  multiply-add turns into ``inf``, so it would hang on how the matmul adds.  The other rows keep finite logits,
  and few rows are boosted, so top-k and top-p have tokens to remove.
* The padding plan is a trap in every row that is not a token: both padding
  blocks and the ids at or above the logits vocabulary.
* Where the ranks' copies of the hidden states differ (``rank_ulps``), a tie must hinge on those ulps: every
  other id of a tie plan takes its boost through feature 3, which holds a copy of feature 0.  On one copy the tie
  stands; on copies a few ulps apart it breaks, each copy its own way.
"""

from __future__ import annotations

import math
import random

import torch

from properties.cases.case import DTYPES, Case, Inputs, layouts_of
from sharded.layout import ShardLayout

BOOST = 256.0
BOOSTED = {False: 0.75, True: 0.25}  # the share of boosted rows, by ``spread``
SPECIAL_ROWS = 0.25  # a spread case's share of rows that switch its specials on
SWITCH = 4.0  # the switches' hidden value: 4 times the dtype's largest weight overflows
ROW_PLANS = ("nan_one_rank", "nan_ranks", "pos_inf", "neg_inf", "huge", "inf_at_ties")  # through the switches
CPU = "cpu"  # cases are built here, whatever the device they run on: the same seed gives the same bits anywhere
LOW = -1024.0


def _ids(rng: random.Random, lay: ShardLayout, k: int) -> list[int]:
    """Up to k of the rank's token ids, base and added alike."""
    picks = rng.sample(range(lay.num_real + lay.num_added), min(k, lay.num_real + lay.num_added))
    return sorted(lay.start + p if p < lay.num_real else lay.added_start + p - lay.num_real for p in picks)


def _tie_ids(plan: str, rng: random.Random, real: list[ShardLayout]) -> list[int]:
    if plan == "within_shard":
        wide = [lay for lay in real if lay.num_real + lay.num_added >= 2]
        return _ids(rng, rng.choice(wide), rng.randint(2, 3)) if wide else []
    if plan == "across_ranks" and len(real) >= 2:
        return [
            _ids(rng, lay, 1)[0] for lay in sorted(rng.sample(real, rng.randint(2, len(real))), key=lambda x: x.rank)
        ]
    base = [lay for lay in real if lay.num_real]
    if plan == "shard_boundary" and len(base) >= 2:
        r = rng.randrange(len(base) - 1)
        return [base[r + 1].start - 1, base[r + 1].start]
    if plan == "softcap_saturation":
        lay = rng.choice(real)
        return _ids(rng, lay, rng.randint(2, 4))
    if plan == "fp32_near_tie":
        return _ids(rng, rng.choice(real), 2) if len(real) == 1 else _tie_ids("across_ranks", rng, real)[:2]
    added = [lay for lay in real if lay.num_added]
    if plan == "added_tie" and added:  # an added id on rank r ties with a base id on a later rank
        lay = rng.choice(added)
        later = [other for other in base if other.rank > lay.rank]
        if later:
            return [_ids(rng, rng.choice(later), 1)[0], lay.added_start + rng.randrange(lay.num_added)]
    if plan == "added_max" and added:
        lay = rng.choice(added)
        return [lay.added_start + rng.randrange(lay.num_added)]
    return []


def _spread(rng: random.Random, real: list[ShardLayout], k: int) -> list[int]:
    """k real ids, each from a random rank."""
    return sorted({_ids(rng, rng.choice(real), 1)[0] for _ in range(k)})


def build(case: Case) -> Inputs:
    """Deterministically build the tensors of ``case`` (same case, same bits)."""
    g = torch.Generator(device=CPU).manual_seed(case.seed)
    rng = random.Random(case.seed)
    layouts = layouts_of(case)
    rows, vocab, batch, hsize = case.vocab + case.added, layouts[0].vocab, case.batch, case.hidden
    real = [lay for lay in layouts if lay.num_real or lay.num_added]
    if case.weights == "int":
        hidden = torch.randint(-3, 4, (batch, hsize), generator=g, device=CPU).float()
        weight = torch.randint(-3, 4, (rows + 1, hsize), generator=g, dtype=torch.int8, device=CPU).float()
        bias = torch.randint(-3, 4, (rows + 1,), generator=g, device=CPU).float() if case.bias else None
    else:
        hidden = torch.randn(batch, hsize, generator=g, device=CPU)
        weight = torch.randn(rows + 1, hsize, generator=g, device=CPU)
        bias = torch.randn(rows + 1, generator=g, device=CPU) if case.bias else None
    hidden[:, 0] = torch.where(torch.rand(batch, generator=g, device=CPU) < BOOSTED[case.spread], 2.0, 0.0)
    hidden[:, 1] = 0.0
    weight[:, 0] = 0.0
    weight[:, 1] = -1.0
    applied: list[str] = []

    anchor = _ids(rng, rng.choice(real), 1)[0]
    tied: list[int] = []  # every id a tie plan planted
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
        weight[ids, 0] = 1.5 * BOOST if plan == "added_max" else BOOST  # an added maximum beats every tie
        if bias is not None:
            bias[ids] = float(bias[ids[0]])
        if plan == "softcap_saturation":  # distinct pre-cap logits that tanh flattens to one value
            order = rng.sample(range(len(ids)), len(ids))
            weight[ids, 0] = torch.tensor([BOOST * (1 + i / 8) for i in order], device=CPU)
        if plan == "fp32_near_tie":  # the larger id wins by 2**-12 per unit of feature 2 (> 0 on every row)
            weight[ids, 2] = 1.0
            weight[max(ids), 2] = 1.0 + 2**-12
            hidden[:, 2] = hidden[:, 2].abs() + 1
        if case.rank_ulps:  # the tie hinges on features 0 and 3, which the ranks' copies nudge apart
            weight[ids[1::2], 3] = weight[ids[1::2], 0]
            weight[ids[1::2], 0] = 0.0
        anchor = ids[0]
        tied += ids
        applied.append(plan)
    if not case.ties:
        weight[anchor, 0] = BOOST
    if case.rank_ulps:
        hidden[:, 3] = hidden[:, 0]

    dtype = DTYPES[case.dtype]
    hidden, weight = hidden.to(dtype), weight.to(dtype)
    bias = None if bias is None else bias.to(dtype)
    _plant_specials(case, rng, real, vocab, batch, hidden, weight, bias, applied, tied)
    _plant_traps(case, anchor, vocab, layouts, weight, bias, applied)
    d2t, target_vocab = _d2t(vocab, case, g)
    pad_bias = None if bias is None else bias[rows].clone()
    return Inputs(
        case,
        hidden,
        weight[:rows],
        bias if bias is None else bias[:rows],
        layouts,
        d2t,
        target_vocab,
        tuple(applied),
        pad_weight=weight[rows].clone(),
        pad_bias=pad_bias,
    )


def _plant_specials(case, rng, real, vocab, batch, hidden, weight, bias, applied, tied) -> None:
    tiny = torch.finfo(weight.dtype).smallest_normal * torch.finfo(weight.dtype).eps  # least subnormal
    background: dict[int, float] = {}
    for plan in case.specials:
        if plan == "signed_zero":  # -tiny, 0 and +tiny: under the case's scale of 0.5 they round to -0, +0, +0
            for i, value in zip(_spread(rng, real, 3), (-tiny, 0.0, tiny), strict=False):
                background[i] = value
        elif plan == "subnormal":
            for i in _spread(rng, real, rng.randint(2, 4)):
                background[i] = tiny * rng.randint(1, 3)
    if background or "all_negative" in case.specials:
        bias[:vocab] = LOW
        for i, value in background.items():
            weight[i] = 0.0
            bias[i] = value
        applied.extend(p for p in ("all_negative", "signed_zero", "subnormal") if p in case.specials)
    plant = _switched(case, rng, batch, hidden, weight) if case.spread else _biased(bias)
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
        elif plan == "inf_at_ties" and tied:  # the tied ids, added and base alike, tie again at +inf
            ids = sorted(set(tied))
        elif plan == "neg_inf_rows":
            few = max(1, batch // 4) if case.spread else batch
            rows = sorted(rng.sample(range(batch), rng.randint(1, few)))
            hidden[rows, 1] = float("inf")
            applied.append(plan)
            continue
        else:
            continue
        if plant is None:  # a spread case none of whose rows switched its specials on
            continue
        for i in ids:
            if plan.startswith("nan"):
                plant(i, rng.choice((nan, -nan)))
            elif plan == "huge":
                plant(i, rng.choice((1, -1)) * huge * rng.uniform(0.5, 1.0))
            else:
                plant(i, float("-inf") if plan == "neg_inf" else float("inf"))
        applied.append(plan)


def _biased(bias):
    """Plant a value at an id through the bias: on every row."""

    def plant(i: int, value: float) -> None:
        bias[i] = value

    return plant


def _switched(case, rng, batch, hidden, weight):
    """Plant values on a minority of rows only (module docstring); None where no row switches on."""
    if not set(case.specials) & set(ROW_PLANS):
        return None
    rows = [r for r in range(batch) if rng.random() < SPECIAL_ROWS]
    if not rows and batch > 1:
        rows = [rng.randrange(batch)]
    if not rows:
        return None
    weight[:, -2:] = 0.0
    hidden[:, -2:] = 0.0
    hidden[rows, -2] = SWITCH
    nan_rows = rows[: (len(rows) + 1) // 2]
    big = torch.finfo(weight.dtype).max

    def plant(i: int, value: float) -> None:
        if math.isnan(value):  # through the hidden state: NaN times any weight is NaN, however the matmul adds
            hidden[nan_rows, -1] = value
        elif math.isinf(value):
            weight[i, -2] = big if value > 0 else -big
        else:
            weight[i, -2] = value / SWITCH

    return plant


def _plant_traps(case, anchor, vocab, layouts, weight, bias, applied) -> None:
    """The padding plan, in the padding row (the last row of ``weight``) and in every id at or above ``vocab``."""
    if not any(lay.num_padding for lay in layouts):
        return
    trap = slice(vocab, None)
    if case.padding == "zero":
        weight[trap] = 0.0
        if bias is not None:
            bias[trap] = 0.0
    elif case.padding == "nan":
        weight[trap] = float("nan")
    else:
        weight[trap] = weight[anchor].clone()
        weight[trap, 1] = 0.0  # traps stay finite on -inf rows
        if bias is not None:
            bias[trap] = float(bias[anchor])
        if case.padding == "above_max":
            weight[trap, 0] = 2 * BOOST
            if bias is not None:
                bias[trap] = 2 * BOOST
    applied.append(f"padding_{case.padding}")


def _d2t(vocab: int, case: Case, g: torch.Generator) -> tuple[torch.Tensor | None, int]:
    target_vocab = vocab + case.target_extra
    if case.d2t == "none":
        return None, vocab
    if case.d2t == "zeros":
        return torch.zeros(vocab, dtype=torch.int64, device=CPU), target_vocab
    return eagle3_d2t(vocab, target_vocab, g), target_vocab


def eagle3_d2t(vocab: int, target_vocab: int, g: torch.Generator) -> torch.Tensor:
    """As EAGLE3 training code builds it: the sorted set of used target ids, ``d2t[i] = used[i] - i``.

    The set is sorted by marking it (linear: ten times faster than a sort at 32k ids).
    """
    used = torch.zeros(target_vocab, dtype=torch.bool, device=CPU)
    used[torch.randperm(target_vocab, generator=g, device=CPU)[:vocab]] = True
    used = used.nonzero().squeeze(1)
    return used - torch.arange(vocab, device=CPU)
