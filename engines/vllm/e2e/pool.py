"""The engines of one run: each (method, tp, switch, dtype) started once, the engines of a group together.

A group is a dtype and a method: its four speculative engines (tp 1 and 2, switch on and off) and the dtype's two
engines without speculation, which every method's group of that dtype shares.  The properties run group by group
(conftest orders them), so the pool starts a group's engines at once (their start-up is mostly imports, and the
cores take turns) and closes the previous group's when the next is asked for: about 11 GiB at most.  An engine that
failed (it died, or missed a deadline) is closed and started again when next asked for, with the pool's plant; its
folder, with its log, is kept unless it died under a plant.
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
        self.planted: str | None = None  # a broken local path in every worker of every engine (the project's tests)

    def get(self, spec: EngineSpec, group: tuple[EngineSpec, ...]) -> Engine:
        """The engine ``spec``, started if need be with every engine of ``group``; the others are closed."""
        for other in [s for s in self._starting if s not in group]:
            self._close(other)
        for member in group:
            future = self._starting.get(member)
            if future is not None and future.done() and future.exception() is None and future.result().broken:
                self._close(member, keep_failed=self.planted is None)  # a planted death was the plant's
            if member not in self._starting:
                self.starts[member] += 1
                self._starting[member] = self._threads.submit(self._start, member)
        try:
            return self._starting[spec].result()
        except BaseException:
            del self._starting[spec]  # asked again, it starts again (and its failure shows again)
            raise

    def _start(self, spec: EngineSpec) -> Engine:
        engine = Engine(spec, self._host)
        if self.planted is not None:
            try:
                engine.plant(self.planted)
            except BaseException:
                engine.close()
                raise
        return engine

    def plant(self, name: str | None) -> None:
        """Put ``name`` (``tests.broken_engine``) into every worker of the engines started and to come; None takes
        it back.  Taking back never raises: an engine that cannot answer is closed (it holds no plant once gone,
        and the failure that broke it is the one to see), and the folder of one that died under the plant is not
        kept (its death was the plant's, and reported), here or when :meth:`get` starts it again."""
        self.planted = name
        for spec, future in list(self._starting.items()):
            try:
                engine = future.result()
            except BaseException:  # noqa: BLE001, S112 - one that failed to start is asked again, and fails there
                continue
            if engine.broken:  # started again when next asked for, with the pool's plant
                self._close(spec, keep_failed=name is not None)
                continue
            try:
                engine.plant(name)
            except BaseException:
                self._close(spec)
                if name is not None:
                    raise

    def _close(self, spec: EngineSpec, keep_failed: bool = True) -> None:
        future = self._starting.pop(spec)
        try:
            future.result().close(keep_failed)
        except BaseException:  # noqa: BLE001, S110 - an engine that never started has nothing to close
            pass

    def close(self) -> None:
        """Close every engine, started or starting: none outlives the run."""
        for spec in list(self._starting):
            self._close(spec)
        self._threads.shutdown(wait=True)
