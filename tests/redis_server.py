"""A real ``redis-server`` for the fleet tests, started and stopped by the test on a Unix socket of its own.

Where the server or the Redis client is missing, the tests skip with the install command as the reason, except
under ``TPARGMAX_REQUIRE_REDIS=1`` (set by ``.ci/run``, which installs both), where they fail: CI must run them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

INSTALL = "apt-get install redis-server && .venv/bin/pip install -e '.[redis]'"
START_TIMEOUT = 30.0


def why_missing(server: bool = True) -> str | None:
    if server and shutil.which("redis-server") is None:
        return f"needs redis-server (Debian's package) and the Redis client: {INSTALL}"
    try:
        import redis  # noqa: F401
    except ImportError:
        return f"needs the Redis client, an opt-in extra: {INSTALL}"
    return None


def require(server: bool = True) -> None:
    """Skip (or, where CI must run these, fail) without the client, or the server where ``server``."""
    why = why_missing(server)
    if why is not None:
        if os.environ.get("TPARGMAX_REQUIRE_REDIS") == "1":
            pytest.fail(f"TPARGMAX_REQUIRE_REDIS=1 (.ci/run), but this test {why}")
        pytest.skip(why)


@contextmanager
def redis_server() -> Iterator[str]:
    """A fresh server with no persistence, listening on a Unix socket only; yields its URL."""
    require()
    import redis

    # a short directory of its own: a Unix socket's path is limited to about 100 bytes
    where = Path(tempfile.mkdtemp(prefix="tpargmax-redis-"))
    socket = where / "redis.sock"
    command = ["redis-server", "--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700"]
    command += ["--save", "", "--appendonly", "no", "--dir", str(where)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"unix://{socket}?db=0"
    try:
        started = time.monotonic()
        while True:
            try:
                redis.Redis.from_url(url, socket_connect_timeout=1).ping()
                break
            except redis.RedisError:
                if server.poll() is not None or time.monotonic() - started > START_TIMEOUT:
                    raise RuntimeError(f"redis-server did not start on {socket} within {START_TIMEOUT:.0f} s") from None
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(where, ignore_errors=True)
