"""A timeout is named as one: which limit ran out, its value and the option that raises it; and the distribution
property's calls fit a slow sampler within the default limit."""

from __future__ import annotations

import time

from groups.simulated import DEFAULT_TIMEOUT
from properties import test_equivalence as eq
from properties import test_sampling as ts
from properties.argmax import checks
from properties.harness.settings import changed
from properties.sampling.distribution import CHUNK
from sharded.impls import Impl
from sharded.local_argmax import vllm_pairs
from sharded.local_sampling import gumbel_pairs
from tests.suite import failure

MS_PER_ROW = 1.0  # a second per 1,000 rows: a sampler written in Python, row by row


def counted_pairs(hidden, weight, bias, layout, *, sampling, scale=1.0, soft_cap=None, d2t=None, group):
    """``gumbel_pairs``, recording how many rows each call carries."""
    CALLS.append(hidden.shape[0])
    return gumbel_pairs(
        hidden, weight, bias, layout, sampling=sampling, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group
    )


counted_pairs.masks = False
counted_pairs.noise = gumbel_pairs.noise
CALLS: list[int] = []


def rank_one_dawdles(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    """Rank 1 computes for two seconds before its collective: slow, not hung."""
    if group.rank == 1:
        time.sleep(2.0)
    return vllm_pairs(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)


def test_a_rank_past_the_limit_names_the_limit_its_value_and_the_option():
    with changed(collective_timeout=0.5):
        message = failure(eq.test_token_exact, Impl("tests.test_timeouts:rank_one_dawdles", rank_one_dawdles))
    first = message.splitlines()[0]
    assert first.startswith("[hang: rank 1 of ") and "still running after 0.5s" in first, message[:600]
    assert first.endswith(f"; the collective timeout of 0.5 s ran out ({checks.RAISES['collective timeout']})]")


def test_the_distribution_fits_a_sampler_that_takes_a_second_per_1000_rows():
    """Every call carries at most CHUNK rows, which such a sampler answers in half a second, a twentieth of the
    default collective timeout (all 4,000 draws in one call took it 4 s); every draw is made."""
    CALLS.clear()
    prop = lambda sampling_impl: ts.test_sampled_distribution(sampling_impl, ts.DISTRIBUTION_CASES[0])  # noqa: E731
    assert failure(prop, Impl("tests.test_timeouts:counted_pairs", counted_pairs)) == ""
    tp = ts.DISTRIBUTION_CASES[0].case.tp
    assert sum(CALLS) == tp * ts.DISTRIBUTION_CASES[0].draws and max(CALLS) == CHUNK  # every rank, every row
    assert CHUNK * MS_PER_ROW / 1000 <= DEFAULT_TIMEOUT / 20
