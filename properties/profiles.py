"""Hypothesis profiles, registered in one place (conftest imports this module).

* ``dev``: fast local feedback (the default outside CI); uses the local example database.
* ``ci``: derandomised, no deadline, no database, prints reproduction blobs.
  Hypothesis loads its own ``ci`` profile when it detects CI; re-registering
  the name keeps that automatic choice and only adds our example budget.
* ``nightly``: many examples, with the example database on.

The local database is ``.hypothesis/examples`` (or ``$TPARGMAX_DB``), shared by
``tpargmax fuzz`` and ordinary runs, so a nightly find is replayed first by the
next ``pytest``. ``TPARGMAX_SHARED_DB=owner/repo`` adds, read-only, the database
that a GitHub Actions workflow of that repository uploads as an artifact.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

CI_EXAMPLES = 300


def example_database() -> ExampleDatabase:
    local = DirectoryBasedExampleDatabase(os.environ.get("TPARGMAX_DB", ".hypothesis/examples"))
    shared = os.environ.get("TPARGMAX_SHARED_DB")
    if not shared:
        return local
    owner, _, repo = shared.partition("/")
    return MultiplexedDatabase(local, ReadOnlyDatabase(GitHubArtifactDatabase(owner, repo)))


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
