"""The engines of one run: each (method, tp, switch, dtype) started once, the engines of a group together.

A group is a dtype and a method: its four speculative engines (tp 1 and 2, switch on and off) and the dtype's two
engines without speculation, which every method's group of that dtype shares.  The properties run group by group
(conftest orders them), so the pool starts a group's engines at once (their start-up is mostly imports, and the
cores take turns) and closes the previous group's when the next is asked for: about 11 GiB at most.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

from engines.vllm.e2e.engine import HOST, Engine, EngineSpec

TPS = (1, 2)


def group_of(dtype: str, method: str) -> tuple[EngineSpec, ...]:
    """The engines the properties of ``(dtype, method)`` use."""
    speculative = [EngineSpec(dtype, method, tp, switch) for tp in TPS for switch in (True, False)]
    return (*speculative, *(EngineSpec(dtype, None, tp) for tp in TPS))


class EnginePool:
    """Engines by spec; :meth:`get` starts the rest of a group with the one asked for."""

    def __init__(self, host: str = HOST) -> None:
        self._host = host  # the host module the engines run (tests give a stand-in)
        self._starting: dict[EngineSpec, Future[Engine]] = {}
        self._threads = ThreadPoolExecutor(max_workers=len(group_of("float32", "eagle3")))
        self.starts: Counter[EngineSpec] = Counter()  # how often each engine started: once, if the run is ordered

    def get(self, spec: EngineSpec, group: tuple[EngineSpec, ...]) -> Engine:
        """The engine ``spec``, started if need be with every engine of ``group``; the others are closed."""
        for other in [s for s in self._starting if s not in group]:
            self._close(other)
        for member in group:
            if member not in self._starting:
                self.starts[member] += 1
                self._starting[member] = self._threads.submit(Engine, member, self._host)
        try:
            return self._starting[spec].result()
        except BaseException:
            del self._starting[spec]  # asked again, it starts again (and its failure shows again)
            raise

    def _close(self, spec: EngineSpec) -> None:
        future = self._starting.pop(spec)
        try:
            future.result().close()
        except BaseException:  # noqa: BLE001, S110 - an engine that never started has nothing to close
            pass

    def close(self) -> None:
        """Close every engine, started or starting: none outlives the run."""
        for spec in list(self._starting):
            self._close(spec)
        self._threads.shutdown(wait=True)
