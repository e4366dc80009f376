"""Properties for a sampler with its own randomness, judged on the pinned heads of
:mod:`properties.sampling.distribution`.

An engine keys its noise as it likes (one key per step for the batch, candidate positions), so its tokens cannot
be compared with the classic sampler's.  What must still hold:

* **batch independence**: a row's distribution does not depend on its batchmates (one that needs the fallback
  among them); where the noise is declared per row (``fn.noise_key`` ``"id"``, the default), neither does its
  token, draw by draw;
* **equal paths**: a sampler that names its own classic path (``fn.classic_path``, an implementation spec) draws
  from that path's distribution on the same inputs: token by token where both key their noise by row and id
  (``"id"``) with the same noise, else by a two-sample chi-square test.

The seeds are pinned, so the verdicts never change between runs; a test's false alarm is below
:data:`~properties.sampling.distribution.FALSE_ALARM`.
"""

from __future__ import annotations

import math

import pytest
import torch

from properties.failures import fail, repro_extra
from properties.harness.runner import prepare
from properties.sampling.checks import noise_key_of, noise_of
from properties.sampling.chi_square import homogeneity
from properties.sampling.distribution import (
    CHI_SQUARE,
    DISTRIBUTION_WRONG,
    FALSE_ALARM,
    DistributionCase,
    backend_of,
    draw_all,
    judge,
)
from sharded.impls import Impl, load_impl

BATCH_INDEPENDENCE = "batch independence: a row draws alike beside any batchmates"
EQUAL_PATHS = "equal paths: the sharded path draws from its own classic path's distribution"
TOKEN_FOLLOWS_BATCH = "a row's token depends on its batchmates: its noise is declared per row (seed, id)"
ROW_FOLLOWS_BATCH = "a row's distribution depends on its batchmates"
PATHS_DIFFER = "the sharded path draws from another distribution than its own classic path"
PATH_TOKENS_DIFFER = "the sharded path's token differs from its own classic path's, given the same noise"


def classic_path_of(impl: Impl) -> Impl | None:
    """The sampler's own classic path (``fn.classic_path``, a spec), or None where it names none."""
    spec = getattr(impl.fn, "classic_path", None)
    return None if spec is None else load_impl(str(spec))


def _first_differing(a: torch.Tensor, b: torch.Tensor) -> list[str]:
    draw = int((a != b).nonzero()[0])
    return [f"draw {draw}: {int(a[draw])} then {int(b[draw])} ({int((a != b).sum())} of {len(a)} draws differ)"]


def _homogeneity_lines(a: torch.Tensor, b: torch.Tensor, names: tuple[str, str]) -> list[str]:
    """``[]`` where two samples of tokens may come from one distribution, else how they differ."""
    size = int(max(a.max(), b.max())) + 1
    ca, cb = torch.bincount(a, minlength=size), torch.bincount(b, minlength=size)
    ids = ((ca + cb) > 0).nonzero().flatten().tolist()
    stat, df, log_p = homogeneity([int(ca[i]) for i in ids], [int(cb[i]) for i in ids])
    if log_p >= math.log(FALSE_ALARM):
        return []
    worst = sorted(ids, key=lambda i: -abs(int(ca[i]) - int(cb[i])))[:3]
    return [
        f"two samples of {len(a)} draws: chi-square {stat:.1f} on {df} degrees of freedom, p = {math.exp(log_p):.3g}",
        *(f"token {i}: {int(ca[i])} times {names[0]}, {int(cb[i])} times {names[1]}" for i in worst),
    ]


def check_batch_independence(impl: Impl, dist: DistributionCase) -> None:
    """The judged row alone and beside its mates: the same tokens (noise per row), else the same distribution."""
    inputs = prepare(dist.case, backend_of(impl))
    with repro_extra(distribution=dist.name):
        alone = draw_all(impl, inputs, dist, False, BATCH_INDEPENDENCE)
        beside = draw_all(impl, inputs, dist, True, BATCH_INDEPENDENCE)
        if noise_key_of(impl) == "id" and not torch.equal(alone, beside):
            fail(TOKEN_FOLLOWS_BATCH, _first_differing(alone, beside), impl, inputs, BATCH_INDEPENDENCE)
        wrong = judge(impl, inputs, dist, alone, BATCH_INDEPENDENCE)
        if wrong:  # wrong alone: the row's own distribution is at fault, not its batchmates
            fail(f"{DISTRIBUTION_WRONG}: {CHI_SQUARE}", wrong, impl, inputs, BATCH_INDEPENDENCE)
        wrong = judge(impl, inputs, dist, beside, BATCH_INDEPENDENCE) or _homogeneity_lines(
            alone, beside, ("alone", "beside its batchmates")
        )
        if wrong:
            fail(f"{ROW_FOLLOWS_BATCH}: {CHI_SQUARE}", wrong, impl, inputs, BATCH_INDEPENDENCE)


def check_equal_paths(impl: Impl, dist: DistributionCase) -> None:
    """The sampler and its own classic path on the same inputs and seeds (the judged row beside its mates)."""
    classic = classic_path_of(impl)
    if classic is None:
        pytest.skip(f"{impl} names no classic path of its own (fn.classic_path)")
    inputs = prepare(dist.case, backend_of(impl))
    with repro_extra(distribution=dist.name):
        mine = draw_all(impl, inputs, dist, True, EQUAL_PATHS)
        theirs = draw_all(classic, inputs, dist, True, EQUAL_PATHS)
        same_noise = noise_key_of(impl) == noise_key_of(classic) == "id" and noise_of(impl) is noise_of(classic)
        if same_noise and not torch.equal(mine, theirs):
            fail(PATH_TOKENS_DIFFER, _first_differing(theirs, mine), impl, inputs, EQUAL_PATHS)
        wrong = _homogeneity_lines(mine, theirs, (str(impl), str(classic)))
        if wrong:
            fail(f"{PATHS_DIFFER}: {CHI_SQUARE}", wrong, impl, inputs, EQUAL_PATHS)
