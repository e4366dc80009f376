"""A pytest plugin for the fleet tests (``-p tests.redis_dies``): the shared example database's server shuts down
once collection is done, after conftest has reached it and before any test runs, as a server dying mid-run."""

from __future__ import annotations

import os


def pytest_collection_finish(session) -> None:
    import redis

    redis.Redis.from_url(os.environ["TPARGMAX_DB"]).shutdown(nosave=True)  # returns once the server has gone
