"""Hypothesis profiles, registered in one place (conftest imports this module).

* ``dev``: fast local feedback (the default outside CI).
* ``ci``: derandomised, no deadline, no database, prints reproduction blobs.
  Hypothesis loads its own ``ci`` profile when it detects CI; re-registering
  the name keeps that automatic choice and only adds our example budget.
* ``nightly``: many examples, with the example database on.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

CI_EXAMPLES = 300

settings.register_profile(
    "dev",
    max_examples=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
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
settings.register_profile(
    "nightly",
    max_examples=20_000,
    deadline=None,
    print_blob=True,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
    suppress_health_check=[HealthCheck.too_slow],
)
