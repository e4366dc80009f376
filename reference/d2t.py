"""Static analysis of a draft-to-target (d2t) table: is local argmax + ``id + d2t[id]`` safe?

The local path equals the classic scatter-then-argmax for every input exactly
when ``map(k) = k + d2t[k]`` is strictly increasing (all ``-inf`` rows aside,
a named divergence).  Any inversion ``i < j`` with ``map(i) > map(j)`` breaks it
as soon as draft ids i and j tie for a row's maximum: the local path returns
``map(i)``, the classic path ``map(j)``.  Duplicate or out-of-range targets make
the classic path itself ill-defined.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

IDENTITY, INCREASING, NON_MONOTONE = "identity", "strictly increasing", "non-monotone"
NON_INJECTIVE, OUT_OF_RANGE, T2D_MISMATCH = "non-injective", "out of range", "t2d inconsistent"
SAFE = (IDENTITY, INCREASING)
SHOWN = 10  # offending ids listed in evidence


@dataclass(frozen=True)
class D2TReport:
    """A classification with its evidence."""

    kind: str
    draft_vocab: int
    target_vocab: int | None
    inversions: int = 0
    first_inversion: tuple[int, int, int, int] | None = None  # (i, j, map(i), map(j)), i < j, map(i) > map(j)
    collisions: tuple[int, ...] = ()  # draft ids that share target collision_target
    collision_target: int | None = None
    out_of_range: tuple[tuple[int, int], ...] = ()  # (draft id, target), the first SHOWN of them
    out_of_range_count: int = 0
    t2d_mismatch: tuple[int, bool, bool] | None = None  # (target id, t2d says used, d2t maps a draft id to it)
    notes: tuple[str, ...] = field(default=())

    @property
    def safe(self) -> bool:
        """Whether ``use_local_argmax_reduction`` returns the classic path's token for every input."""
        return self.kind in SAFE

    def evidence(self) -> str:
        if self.kind == OUT_OF_RANGE:
            shown = ", ".join(f"{k} -> {t}" for k, t in self.out_of_range)
            bound = f"[0, {self.target_vocab})" if self.target_vocab is not None else "[0, ...)"
            return f"{self.out_of_range_count} draft id(s) map outside {bound}: {shown}"
        if self.kind == NON_INJECTIVE:
            return f"draft ids {', '.join(map(str, self.collisions))} share target {self.collision_target}"
        if self.kind == T2D_MISMATCH:
            t, used, mapped = self.t2d_mismatch
            return (
                f"target {t}: t2d says {'used' if used else 'unused'}, but d2t "
                f"{'maps a draft id to it' if mapped else 'maps no draft id to it'}"
            )
        if self.kind == NON_MONOTONE:
            i, j, ti, tj = self.first_inversion
            return (
                f"{self.inversions} inverted pair(s); the first: draft ids {i} < {j} map to {ti} > {tj}, "
                f"so a tie between them gives the local path {ti} and the classic path {tj}"
            )
        if self.kind == IDENTITY:
            return "every offset is zero: draft id k is target k"
        return f"k + d2t[k] rises strictly over all {self.draft_vocab} draft ids"

    def to_json(self) -> dict:
        return {**asdict(self), "safe": self.safe, "evidence": self.evidence()}


def count_inversions(values: torch.Tensor) -> int:
    """Pairs ``i < j`` with ``values[i] > values[j]``, by a vectorised bottom-up merge count."""
    n = values.numel()
    if n < 2:
        return 0
    size = 1 << (n - 1).bit_length()
    arr = torch.cat([values.to(torch.int64), values.max().to(torch.int64).repeat(size - n) + 1])
    total, half = 0, 1
    while half < size:
        blocks = arr.view(-1, 2 * half)
        left, right = blocks[:, :half].contiguous(), blocks[:, half:].contiguous()
        total += int((half - torch.searchsorted(left, right, right=True)).sum())
        arr = blocks.sort(dim=1).values.reshape(-1)
        half *= 2
    return total


def first_inversion(targets: torch.Tensor) -> tuple[int, int, int, int] | None:
    """The first draft id that some later id undercuts, and the later id with the smallest target."""
    if targets.numel() < 2:
        return None
    suffix_min = targets.flip(0).cummin(0).values.flip(0)
    bad = (targets[:-1] > suffix_min[1:]).nonzero()
    if bad.numel() == 0:
        return None
    i = int(bad[0])
    j = i + 1 + int(torch.argmin(targets[i + 1 :]))
    return i, j, int(targets[i]), int(targets[j])


def analyse_d2t(
    d2t: torch.Tensor | None,
    target_vocab: int | None = None,
    t2d: torch.Tensor | None = None,
    draft_vocab: int | None = None,
) -> D2TReport:
    """Classify a d2t table (``None`` means no table) against the target vocabulary and ``t2d`` mask."""
    if d2t is None:
        return D2TReport(IDENTITY, draft_vocab or 0, target_vocab)
    if d2t.ndim != 1 or d2t.dtype.is_floating_point or d2t.dtype == torch.bool:
        raise ValueError(f"d2t must be a 1-D integer tensor, got {d2t.dtype} of shape {tuple(d2t.shape)}")
    if t2d is not None and target_vocab is None:
        target_vocab = t2d.numel()
    vocab = d2t.numel()
    targets = torch.arange(vocab, dtype=torch.int64, device=d2t.device) + d2t.to(torch.int64)
    bad = targets < 0 if target_vocab is None else (targets < 0) | (targets >= target_vocab)
    if bool(bad.any()):
        ids = bad.nonzero().flatten()
        shown = tuple((int(k), int(targets[k])) for k in ids[:SHOWN])
        return D2TReport(OUT_OF_RANGE, vocab, target_vocab, out_of_range=shown, out_of_range_count=ids.numel())
    ordered, order = torch.sort(targets, stable=True)
    same = (ordered[1:] == ordered[:-1]).nonzero().flatten()
    if same.numel():
        target = int(ordered[int(same[0])])
        ids = tuple(sorted(int(k) for k in (targets == target).nonzero().flatten()))
        return D2TReport(NON_INJECTIVE, vocab, target_vocab, collisions=ids, collision_target=target)
    if t2d is not None:
        image = torch.zeros(t2d.numel(), dtype=torch.bool, device=targets.device)
        image[targets] = True
        diff = (image != t2d.to(targets.device, torch.bool)).nonzero().flatten()
        if diff.numel():
            t = int(diff[0])
            return D2TReport(T2D_MISMATCH, vocab, target_vocab, t2d_mismatch=(t, bool(t2d[t]), bool(image[t])))
    inversion = first_inversion(targets)
    if inversion is not None:
        return D2TReport(
            NON_MONOTONE, vocab, target_vocab, inversions=count_inversions(targets), first_inversion=inversion
        )
    kind = IDENTITY if bool((d2t == 0).all()) else INCREASING
    return D2TReport(kind, vocab, target_vocab)
