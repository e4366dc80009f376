"""Where Hypothesis keeps its examples: a local directory, a live Redis server a fleet shares, a nightly artifact.

``TPARGMAX_DB`` is a directory (default ``.hypothesis/examples``) or a Redis URL (``redis://HOST:PORT/N``,
``rediss://...``, ``unix:///path/redis.sock?db=N``).  A Redis URL puts Hypothesis's ``RedisExampleDatabase``
beside the local directory (``TPARGMAX_DB_DIR``, default ``.hypothesis/examples``), so a find one worker saves is
replayed first by every other worker's and developer's next run; ``TPARGMAX_DB_READONLY=1`` reads it without
writing (pull-request CI).  The Redis client is an opt-in extra (``pip install -e '.[redis]'``).

A server that cannot be reached at the start is a one-line error (:func:`problem`, checked by conftest and
``tpargmax fuzz``), never a quiet fall-back to the directory.  One that goes away mid-run is reported once, as a
warning, and the run goes on with the directory and the repro files: a find is never lost to a dead server.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable

from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

LOCAL = ".hypothesis/examples"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
INSTALL_HINT = "pip install -e '.[redis]'"
CONNECT_TIMEOUT = 5.0  # seconds to reach the server; a call on a live connection may take SOCKET_TIMEOUT
SOCKET_TIMEOUT = 30.0


class ServerWentAway(UserWarning):
    """The shared example database stopped answering mid-run; finds go on to the directory and repro files."""


def configured() -> str:
    """``TPARGMAX_DB`` as given (a directory or a Redis URL), or the local directory."""
    return os.environ.get("TPARGMAX_DB") or LOCAL


def local_dir() -> str:
    """The directory: ``TPARGMAX_DB`` when it is one, else ``TPARGMAX_DB_DIR`` or ``.hypothesis/examples``."""
    url = configured()
    return (os.environ.get("TPARGMAX_DB_DIR") or LOCAL) if is_redis(url) else url


def is_redis(url: str) -> bool:
    return url.startswith(REDIS_SCHEMES)


def shown(url: str) -> str:
    """The URL without a password, for messages."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest else url


def _client(url: str):
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=SOCKET_TIMEOUT)


def problem(url: str | None = None) -> str | None:
    """Why the example database ``url`` (default :func:`configured`) cannot be used, in one line, or None."""
    url = configured() if url is None else url
    if "://" in url and not is_redis(url):
        return f"TPARGMAX_DB={shown(url)}: a directory or a Redis URL ({', '.join(REDIS_SCHEMES)}), nothing else"
    if not is_redis(url):
        return None
    try:
        import redis
    except ImportError:
        return f"TPARGMAX_DB={shown(url)} needs the Redis client, an opt-in extra: {INSTALL_HINT}"
    try:
        with _client(url) as client:
            client.ping()
    except (redis.RedisError, ValueError, OSError) as error:
        return f"TPARGMAX_DB={shown(url)}: cannot reach the Redis server: {_detail(error)}"
    return None


def _detail(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__


class Tolerant(ExampleDatabase):
    """A shared database that, once its server stops answering, warns once and is skipped from then on."""

    def __init__(self, inner: ExampleDatabase, name: str) -> None:
        super().__init__()
        self.inner, self.name, self.down = inner, name, False

    def _call(self, method: str, *args) -> object:
        if self.down:
            return None
        import redis

        try:
            result = getattr(self.inner, method)(*args)
            return list(result) if method == "fetch" else result
        except (redis.RedisError, OSError) as error:
            self.down = True
            warnings.warn(
                f"the example database {self.name} went away ({_detail(error)}): this run goes on with "
                f"{local_dir()} and the repro files; finds from now on reach the others when they replay those",
                ServerWentAway,
                stacklevel=2,
            )
            return None

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self._call("fetch", key) or []

    def save(self, key: bytes, value: bytes) -> None:
        self._call("save", key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._call("delete", key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._call("move", src, dest, value)

    def __repr__(self) -> str:
        return f"Tolerant({self.name})"


def _shared_redis(url: str) -> ExampleDatabase | None:
    """The Redis database at ``url``, read-only where ``TPARGMAX_DB_READONLY=1``; None without the client (then
    :func:`problem` says so before anything runs)."""
    try:
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        return None
    db: ExampleDatabase = Tolerant(RedisExampleDatabase(_client(url)), shown(url))
    return ReadOnlyDatabase(db) if os.environ.get("TPARGMAX_DB_READONLY") == "1" else db


def example_database() -> ExampleDatabase:
    """The ``dev`` and ``nightly`` profiles' database: the directory, the Redis server beside it, the artifact."""
    url = configured()
    local = DirectoryBasedExampleDatabase(local_dir())
    parts: list[ExampleDatabase] = [local]
    if is_redis(url) and (shared := _shared_redis(url)) is not None:
        parts.append(shared)
    artifact = os.environ.get("TPARGMAX_SHARED_DB")
    if artifact:
        owner, _, repo = artifact.partition("/")
        parts.append(ReadOnlyDatabase(GitHubArtifactDatabase(owner, repo)))
    return parts[0] if len(parts) == 1 else MultiplexedDatabase(*parts)
