"""Hypothesis profiles, registered in one place (conftest imports this module).

* ``dev``: fast local feedback (the default outside CI); uses the local example database.
* ``ci``: derandomised, no deadline, no database, prints reproduction blobs.
  Hypothesis loads its own ``ci`` profile when it detects CI; re-registering
  the name keeps that automatic choice and only adds our example budget.
* ``nightly``: many examples, with the example database on.

Each profile's ``max_examples`` is what a property gets on the simulated group;
on a real process group it gets ``BACKEND_SHARE`` of that, and the properties in
``PROPERTY_SHARE`` get that share of it again (the samplers' properties: ``SAMPLER_SHARE``,
see :func:`share`).  Both run the same rank code.  The search for a wrong token needs many examples and is spent where
they are cheap; what a process group adds (real collectives, processes,
pickling) shows on any example, and costs more per example, most of all when
xdist workers and rank processes share two cores.

The example database (:mod:`properties.harness.example_db`) is ``.hypothesis/examples``, a
directory in ``$TPARGMAX_DB``, or a Redis server beside the directory
(``TPARGMAX_DB=redis://HOST:PORT/N``), shared by ``tpargmax fuzz`` and ordinary
runs, so a nightly find is replayed first by the next ``pytest``.
``TPARGMAX_SHARED_DB=owner/repo`` adds, read-only, the database that a GitHub
Actions workflow of that repository uploads as an artifact.  The ``ci`` profile
is derandomised, which in Hypothesis means no database at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hypothesis import HealthCheck, settings

from properties.harness.example_db import example_database

E2E_SHARE = 0.01  # vLLM's engine end to end (--e2e): an example reloads an engine's weights and generates (0.2 to 4 s)
# The layouts beyond one even split (properties/test_layouts.py): the token properties search the values at full budget
# on the even layout; these search the layout, whose faults show on most cases.  Exactness under divergence checks
# agreement first, so ranks agreeing alone restates it.  On a process group their share alone, without the floor
# (what real collectives add there, unequal shapes above all, shows on their pinned cases).
LAYOUT_SHARE = {
    "test_ranks_agree": 0.0625,
    "test_exact_under_divergence": 0.125,
    "test_attention_dp_rows": 0.125,
    "test_uneven_shards": 0.125,
    "test_top_k_uneven_shards": 0.125,
}
CI_EXAMPLES = 800  # 300 from issue 31 to 39 (360 from 18 to 30); 240 missed tests.broken:inf_ties_by_rank
BACKEND_SHARE = {"sim": 1.0, "gloo": 1 / 16, "torchrun": 1 / 16}  # 50 of 800: 1/6 of 300 before
PROCESS_GROUPS = ("gloo", "torchrun")
# Properties that restate another's answer, or that more examples would not find more in, run a share of the
# budget: the byte counts depend on B, tp and k only; determinism and top-1 rerun what token and top-k exactness
# already judge.
PROPERTY_SHARE = {
    # tp invariance and row independence run the implementation two and three times per example (an example costs
    # two to three token-exact ones), on cases the token properties search at full budget; contracts, refused
    # inputs and the d2t flag go wrong on most cases.  tests/test_power.py runs each property at its share: every
    # planted bug it names is found there.
    "test_tp_invariance": 0.25,
    "test_row_independence": 0.25,
    "test_output_contract": 0.5,
    "test_top_k_contract": 0.5,
    "test_rejects_bad_input": 0.5,
    "test_the_flag_fires_exactly_on_non_monotone_tables": 0.5,
    "test_the_top_k_flag_fires_exactly_on_non_monotone_tables": 0.5,
    "test_bytes_per_step": 0.25,
    "test_top_k_bytes_per_step": 0.25,
    "test_determinism": 0.25,  # two runs an example
    "test_top_k_determinism": 0.25,
    "test_top1_is_the_argmax_token": 0.25,
    # every example is the same situation (each row all -inf, d2t shifting id 0): sizes and tp vary, little else
    "test_all_neg_inf_row_with_offset_d2t": 0.25,
    **LAYOUT_SHARE,
    # vLLM's engine end to end, on one to four engines an example: 8 drawn per engine and property under ci, after
    # one pinned per planted case
    **dict.fromkeys(("test_draft_tokens", "test_lossless", "test_same_drafts", "test_exact_acceptance"), E2E_SHARE),
}
# Sampling: every rank merges every row, and the oracle draws noise over the whole vocabulary, so an example costs
# five to ten argmax examples, and the search for a wrong token runs on the argmax properties' cases.  The samplers'
# properties take their share of 3/8 of the budget (of 300 under ci, as before), and of a sixth of that on a process
# group.
SAMPLER_SHARE = {
    "test_sample_exact": 0.25,
    "test_kept_set": 0.125,
    "test_sample_log_probs": 0.125,
    "test_sample_invariance": 0.0625,
    # exactness implies it wherever the noise is declared; it judges the samplers with their own randomness
    "test_sample_support": 0.0625,
}
SAMPLER_BUDGET = 3 / 8
PROCESS_GROUP_FLOOR = 0.5  # of a process group's budget: what it adds (processes, pickling) shows on any example
SAMPLER_BACKEND_SHARE = {"sim": 1.0, "gloo": 1 / 6, "torchrun": 1 / 6}


def share(test: str, backend: str | None) -> float:
    """The share of a profile's ``max_examples`` that property ``test`` runs on ``backend``."""
    if test in SAMPLER_SHARE:
        return SAMPLER_BUDGET * SAMPLER_BACKEND_SHARE.get(backend, 1.0) * SAMPLER_SHARE[test]
    return BACKEND_SHARE.get(backend, 1.0) * PROPERTY_SHARE.get(test, 1.0)


def budget(test: str, backend: str | None, max_examples: int = CI_EXAMPLES) -> int:
    """How many examples property ``test`` runs on ``backend`` under a profile of ``max_examples``: on a process group,
    an argmax property runs at least half the backend's budget (25 of 50 under ci), as before issue 40."""
    floor = (
        0
        if test in SAMPLER_SHARE or test in LAYOUT_SHARE
        else (round(max_examples * BACKEND_SHARE[backend] * PROCESS_GROUP_FLOOR) if backend in PROCESS_GROUPS else 0)
    )
    return max(1, floor, round(max_examples * share(test, backend)))


_LOCAL = settings(  # dev and nightly: no deadline (threads and processes), the local database, blobs
    deadline=None,
    print_blob=True,
    database=example_database(),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", _LOCAL, max_examples=40)
settings.register_profile("nightly", _LOCAL, max_examples=20_000)
settings.register_profile(
    "ci",
    settings.get_profile("ci"),
    max_examples=CI_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


_SETTINGS = "_hypothesis_internal_use_settings"  # the attribute that ``@settings`` sets on a test


@contextmanager
def running_with(test: Callable, new: settings) -> Iterator[None]:
    """While inside, Hypothesis test ``test`` runs with ``new``; its own settings come back afterwards.

    Hypothesis looks a test's settings up on the test function when it is
    called, so one function can run with other settings for a while.
    """
    current = getattr(test, _SETTINGS)
    setattr(test, _SETTINGS, new)
    try:
        yield
    finally:
        setattr(test, _SETTINGS, current)


@contextmanager
def backend_budget(test: Callable, backend: str | None) -> Iterator[None]:
    """While it runs on ``backend``, give Hypothesis test ``test`` its share of its examples."""
    current = getattr(test, _SETTINGS, None)
    name = getattr(test, "__name__", "")
    if current is None or share(name, backend) == 1.0:
        yield
        return
    with running_with(test, settings(current, max_examples=budget(name, backend, current.max_examples))):
        yield
