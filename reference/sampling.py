"""The classic sampler: every token's logit, per-row temperature, top-k and top-p masks, Gumbel noise, first maximum.

Sampling with fixed randomness is an argmax, so the oracle is exact: for a row with temperature ``T > 0``

1. ``x = float32(logit) / float32(T)`` over the whole (target) vocabulary: with ``d2t`` the draft logits are
   scattered first, unmapped targets hold ``-inf``;
2. top-k (``0 < k < V``): keep ``x >= `` the k-th largest ``x`` (ties at the k-th value are all kept; NaN ranks above
   everything, as in the argmax rule);
3. top-p (``p < 1``): keep token ``i`` when the mass of the kept tokens with a strictly larger ``x`` is below ``p``
   times the kept mass (tokens with equal ``x`` stay or go together, the largest always stays).  Masses are float64
   ``exp(x - M)``, ``M`` the largest kept ``x``; the kept mass is their sum, the mass above ``x_i`` the running sum
   in descending ``x`` (a row with a NaN or ``+inf`` has no probabilities: top-p keeps what top-k kept);
4. ``score = x + g``, float32, with ``g`` the Gumbel noise of (row seed, target id) (:func:`gumbel_noise`, or the
   noise the implementation declares), ``-inf`` where masked; the token is the first maximum of ``score`` by target
   id, NaN first, ``-0.0 == +0.0``.

A row with ``T == 0`` is greedy: today's argmax, noise and masks ignored.  Imports nothing from ``sharded/``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from reference.checks import InvalidInput
from reference.oracle import scatter_to_target, tokens_from_draft_logits
from reference.topk import order_keys

Noise = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (seeds [B], ids [n] or [B, n]) -> float32 [B, n]


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


_M1, _M2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)  # splitmix64's finaliser
_GOLDEN = _signed(0x9E3779B97F4A7C15)


def _shift(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser in int64 ops: multiplication wraps modulo 2**64 on every device."""
    z = (z ^ _shift(z, 30)) * _M1
    z = (z ^ _shift(z, 27)) * _M2
    return z ^ _shift(z, 31)


def uniforms(seeds: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """float64 ``[B, n]`` in (0, 1), a pure function of (row seed, token id): ``(top 52 hash bits + 0.5) / 2**52``,
    exact in float64, never 0 or 1."""
    ids = ids if ids.ndim == 2 else ids.unsqueeze(0)
    z = _mix(_mix(seeds.to(torch.int64).unsqueeze(1) + _GOLDEN) ^ (ids.to(torch.int64) * _GOLDEN))
    return (_shift(z, 12).double() + 0.5) * 2.0**-52


def gumbel_noise(seeds: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The contract's noise: float32 ``-log(-log(u))`` of :func:`uniforms`, computed in float64 and rounded once."""
    return uniforms(seeds, ids).log().neg().log().neg().float()


@dataclass(frozen=True)
class SamplingParams:
    """Per-row sampling parameters, tensors ``[B]``; ``candidates`` is the candidate path's C (one per batch).

    ``temperature`` float32 (0: greedy), ``top_k`` int64 (0, or at least the vocabulary: off), ``top_p`` float32 in
    (0, 1] (1: off), ``seed`` int64 (any bits).  ``vocab`` is the target vocabulary's size, as an engine knows it
    from its config (0: not given; a sampler then knows the targets up to the largest ``d2t`` maps to), for a
    sampler whose noise depends on the row's width.
    """

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    seed: torch.Tensor
    candidates: int = 64
    vocab: int = 0

    def check(self, batch: int) -> None:
        """Bad parameters are a ValueError that names the field."""
        want = {"temperature": torch.float32, "top_k": torch.int64, "top_p": torch.float32, "seed": torch.int64}
        for name, dtype in want.items():
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != (batch,):
                got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise InvalidInput(f"sampling {name} must be {dtype} [{batch}] (one per row), got {got}")
        if not bool((torch.isfinite(self.temperature) & (self.temperature >= 0)).all()):
            raise InvalidInput("sampling temperature must be finite and >= 0 (0: greedy)")
        if bool((self.top_k < 0).any()):
            raise InvalidInput("sampling top_k must be >= 0 (0: off)")
        if not bool(((self.top_p > 0) & (self.top_p <= 1)).all()):
            raise InvalidInput("sampling top_p must lie in (0, 1] (1: off)")
        if isinstance(self.candidates, bool) or not isinstance(self.candidates, int) or self.candidates < 1:
            raise InvalidInput(f"sampling candidates must be an int >= 1, got {self.candidates!r}")
        if isinstance(self.vocab, bool) or not isinstance(self.vocab, int) or self.vocab < 0:
            raise InvalidInput(f"sampling vocab must be an int >= 0 (0: not given), got {self.vocab!r}")

    def to(self, device: torch.device | str, copy: bool = False) -> SamplingParams:
        """On ``device``; ``copy``: new tensors even where they are there already (a sampler may write into them)."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return SamplingParams(
            **{k: v.to(device, copy=copy) if isinstance(v, torch.Tensor) else v for k, v in moved.items()}
        )

    def rows(self, rows: list[int]) -> SamplingParams:
        return SamplingParams(
            self.temperature[rows], self.top_k[rows], self.top_p[rows], self.seed[rows], self.candidates, self.vocab
        )

    @property
    def greedy(self) -> torch.Tensor:
        return self.temperature == 0


def scaled(values: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """``float32(logit) / T`` per row (greedy rows divided by 1: their logits as they are)."""
    t = torch.where(params.greedy, torch.ones_like(params.temperature), params.temperature)
    return values.float() / t.to(values.device).unsqueeze(1)


def top_k_mask(x: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """bool ``[B, V]``: ``x >=`` each row's k-th largest (NaN above all); rows with k off keep everything."""
    keys = order_keys(x)
    vocab = x.shape[1]
    on = (top_k > 0) & (top_k < vocab)
    if not bool(on.any()):
        return torch.ones_like(x, dtype=torch.bool)
    kmax = int(top_k[on].max())
    top = keys.topk(kmax, dim=1).values
    kth = top.gather(1, (top_k.clamp(1, kmax) - 1).unsqueeze(1).to(x.device))
    return (keys >= kth) | ~on.to(x.device).unsqueeze(1)


def has_probabilities(x: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """bool ``[B]``: the kept logits have no NaN and no ``+inf``, and one is finite (softmax is defined)."""
    masked = x.masked_fill(~kept, -math.inf)
    return ~(masked.isnan() | (masked == math.inf)).any(1) & torch.isfinite(masked).any(1)


def masses(x: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """float64 ``exp(x - M)`` over the kept tokens (0 elsewhere), ``M`` the row's largest kept ``x``."""
    masked = x.double().masked_fill(~kept, -math.inf)
    top = masked.amax(dim=1, keepdim=True)
    return (masked - torch.where(torch.isfinite(top), top, torch.zeros_like(top))).exp()


def mass_above(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """float64 ``[B, V]``: for each token, the sum of ``e`` over tokens with a strictly larger ``x`` (running sum in
    descending ``x``; equal ``x`` share the sum before their group)."""
    ordered = x.float().masked_fill(x.isnan(), math.inf)  # a NaN row has no probabilities: any order will do
    order = ordered.sort(dim=1, descending=True, stable=True)
    sorted_e = e.gather(1, order.indices)
    before = sorted_e.cumsum(dim=1) - sorted_e
    descending = order.values.neg().add(0.0).contiguous()  # ascending; + 0.0 makes -0.0 and +0.0 one key
    first = torch.searchsorted(descending, descending, right=False)
    above = before.gather(1, first)
    return torch.empty_like(above).scatter_(1, order.indices, above)


def top_p_margin(
    x: torch.Tensor, kept: torch.Tensor, top_p: torch.Tensor, total: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 ``[B, V]``: each token's kept mass above it minus ``p`` times the kept mass (``total``, ``[B, 1]``: the
    sum of the kept masses unless given), and that ``total``.  A token is in the nucleus when its margin is below 0."""
    e = masses(x, kept)
    above = mass_above(x.masked_fill(~kept, -math.inf), e)
    total = e.sum(dim=1, keepdim=True) if total is None else total
    return above - top_p.to(x.device).double().unsqueeze(1) * total, total


def top_p_mask(
    x: torch.Tensor, kept: torch.Tensor, top_p: torch.Tensor, total: torch.Tensor | None = None
) -> torch.Tensor:
    """bool ``[B, V]``: the top-p mask on top of ``kept`` (module docstring, step 3); ``total`` as for
    :func:`top_p_margin` (a candidate path knows the kept mass from every rank's words)."""
    on = (top_p < 1).to(x.device) & has_probabilities(x, kept)
    if not bool(on.any()):
        return kept
    margin, _ = top_p_margin(x, kept, top_p, total)
    return kept & ((margin < 0) | ~on.unsqueeze(1))


def kept_mask(x: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The tokens a sampled row may draw: top-k, then top-p over what top-k kept."""
    kept = top_k_mask(x, params.top_k)
    return top_p_mask(x, kept, params.top_p)


def target_logits(
    logits: torch.Tensor, d2t: torch.Tensor | None, target_vocab: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The row the classic path samples from, by target id, and the ids that are some draft id's target."""
    if d2t is None:
        return logits, torch.ones(logits.shape[1], dtype=torch.bool, device=logits.device)
    if target_vocab is None:
        raise InvalidInput("target_vocab is required with d2t")
    full = scatter_to_target(logits, d2t, target_vocab)
    mapped = torch.zeros(target_vocab, dtype=torch.bool, device=logits.device)
    mapped[torch.arange(logits.shape[1], device=logits.device) + d2t] = True
    return full, mapped


def support_mask(x: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """bool ``[B, V]``: the tokens the classic draw returns for some noise (finite noise, any law): the first kept
    NaN where there is one (``NaN + g`` is NaN, and NaN wins), else the first kept ``+inf``, else target 0 where
    every kept ``x`` is ``-inf`` (every score is), else every kept token with a finite ``x``.  A sampler with its
    own randomness draws within it on every row, whatever its noise."""
    ids = torch.arange(x.shape[1], device=x.device).expand_as(x)
    nan, inf = kept & x.isnan(), kept & (x == math.inf)
    finite = kept & torch.isfinite(x)

    def first(mask: torch.Tensor) -> torch.Tensor:
        return ids == torch.where(mask, ids, x.shape[1]).amin(dim=1, keepdim=True)

    none = ~(nan.any(1) | inf.any(1) | finite.any(1))
    return torch.where(
        nan.any(1, keepdim=True),
        first(nan),
        torch.where(inf.any(1, keepdim=True), first(inf), torch.where(none.unsqueeze(1), ids == 0, finite)),
    )


@dataclass(frozen=True)
class Sample:
    """The classic sampler's answer: tokens ``[B]``, kept masks ``[B, V_target]``, log-probs float64 ``[B, 2]``."""

    tokens: torch.Tensor
    kept: torch.Tensor
    log_probs: torch.Tensor


def classic_sample(
    logits: torch.Tensor,
    params: SamplingParams,
    d2t: torch.Tensor | None = None,
    target_vocab: int | None = None,
    noise: Noise = gumbel_noise,
) -> Sample:
    """The classic sampler over full-vocabulary draft logits ``[B, L]`` (module docstring)."""
    params.check(logits.shape[0])
    params = params.to(logits.device)
    full, mapped = target_logits(logits, d2t, target_vocab)
    x = scaled(full, params)
    kept = kept_mask(x, params) & mapped  # a target no draft id maps to is no token
    ids = torch.arange(full.shape[1], device=logits.device)
    score = (x + noise(params.seed, ids).to(x.device)).masked_fill(~kept, -math.inf)
    greedy = params.greedy
    tokens = torch.where(greedy, tokens_from_draft_logits(logits, d2t, target_vocab), score.argmax(dim=1))
    kept = torch.where(greedy.unsqueeze(1), ids.unsqueeze(0) == tokens.unsqueeze(1), kept)
    return Sample(tokens, kept, log_probs(full, x, kept, tokens, greedy))


def log_probs(
    full: torch.Tensor, x: torch.Tensor, kept: torch.Tensor, tokens: torch.Tensor, greedy: torch.Tensor
) -> torch.Tensor:
    """float64 ``[B, 2]``: the chosen token's raw ``log_softmax(logits)`` and processed ``log_softmax`` over the kept
    ``x`` (a greedy row's processed log-prob is its raw one); NaN, ``+inf`` and all ``-inf`` rows as ``log_softmax``
    gives them (NaN)."""
    at = tokens.unsqueeze(1)
    raw = torch.log_softmax(full.double(), dim=1).gather(1, at).squeeze(1)
    processed = torch.log_softmax(x.double().masked_fill(~kept, -math.inf), dim=1).gather(1, at).squeeze(1)
    return torch.stack([raw, torch.where(greedy, raw, processed)], dim=1)
