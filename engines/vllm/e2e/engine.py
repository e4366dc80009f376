"""One vLLM engine per (method, tp, switch, dtype), in a host process of its own, driven with timeouts.

The driver never imports vLLM: it writes the models, starts ``python -m engines.vllm.e2e.host`` in a new process
group with the environment vLLM needs on a CPU, and talks to it in JSON lines.  Every answer has a deadline that
names itself; a host that misses one, or dies, is ended with its whole process group (vLLM's workers included), and
the error carries the last lines of its log.  No engine outlives :meth:`Engine.close` (nor its driver: the host
watches for that).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.vllm.e2e.checkpoints import write_models, write_plan
from engines.vllm.e2e.scenario import METHODS, SIZES, Scenario

ROOT = Path(__file__).resolve().parents[3]
DTYPES = ("float32", "bfloat16")
HOST = "engines.vllm.e2e.host"
# Generous: measured 20-60 s a start on 2 cores (six at once: 3-4 min each), 0.1-4 s a generate
TIMEOUTS = {"start": ("TPARGMAX_E2E_START_TIMEOUT", 900.0), "call": ("TPARGMAX_E2E_CALL_TIMEOUT", 300.0)}


def timeout(kind: str) -> tuple[float, str]:
    """Seconds an engine may take to ``kind`` ("start" or "call"), and the setting that changes it."""
    name, default = TIMEOUTS[kind]
    try:
        return float(os.environ.get(name, default)), name
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {os.environ[name]!r}") from None


MAX_NUM_SEQS = 8
# What vLLM needs on a CPU with few cores, set here rather than by the user (docs/vllm.md, "End to end"):
# no core pinning (with tp 2 on 2 cores vLLM asserts it lacks NUMA nodes), one OpenMP thread per worker, no hub.
ENGINE_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
}


class EngineFailed(RuntimeError):
    """An engine did not start, did not answer in time, died, or refused a request: the message says which, and
    shows the end of its log."""


class EngineDied(EngineFailed):
    """An engine died in a generate whose proposal raised: ``run`` holds what its workers' probes wrote first (the
    calls of the draft's head up to the one that raised; no outputs), for the checks to name the rule."""

    def __init__(self, message: str, run: Generated) -> None:
        super().__init__(message)
        self.run = run


@dataclass(frozen=True, order=True)
class EngineSpec:
    """Which engine: ``method`` None serves the target alone (no speculation, so no switch)."""

    dtype: str
    method: str | None
    tp: int
    switch: bool = False

    def __post_init__(self) -> None:
        if self.method is not None and self.method not in METHODS:
            raise ValueError(f"EngineSpec: method must be one of {METHODS} or None, got {self.method!r}")
        if self.dtype not in DTYPES or self.tp not in (1, 2) or (self.method is None and self.switch):
            raise ValueError(f"EngineSpec: dtype in {DTYPES}, tp 1 or 2, no switch without a method; got {self!r}")

    @property
    def name(self) -> str:
        if self.method is None:
            return f"target-tp{self.tp}-{self.dtype}"
        return f"{self.method}-tp{self.tp}-{'on' if self.switch else 'off'}-{self.dtype}"


@dataclass
class Generated:
    """An engine's answer to one scenario: tokens by prompt, counters, and where the probe wrote each rank's
    records (None without a draft)."""

    spec: EngineSpec
    scenario: Scenario
    outputs: list[list[int]]
    request_ids: list[str]
    counters: dict[str, int]
    records: list[Path] | None
    seconds: float
    plant: str | None = None  # a broken local path the project's tests put into every worker (tests.broken_engine)


class Engine:
    """A started engine; :meth:`run` reloads an example's weights and generates; :meth:`close` ends it."""

    def __init__(self, spec: EngineSpec, host: str = HOST) -> None:
        self.spec = spec
        self.dir = Path(tempfile.mkdtemp(prefix=f"tpargmax-e2e-{spec.name}-"))
        self.log = self.dir / "engine.log"
        self.info: list[dict[str, Any]] = []
        models = write_models(self.dir / "models", spec.method)
        host_spec = {
            "method": spec.method,
            "tp": spec.tp,
            "switch": spec.switch,
            "dtype": spec.dtype,
            "target": str(models["target"]),
            "draft": str(models.get("draft", "")),
            "num_speculative_tokens": SIZES.num_speculative_tokens,
            "max_len": SIZES.max_len,
            "max_num_seqs": MAX_NUM_SEQS,
        }
        read, write = os.pipe()
        env = {**os.environ, **ENGINE_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", host, json.dumps(host_spec), str(write)],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write,),
                start_new_session=True,  # its own process group: close() ends vLLM's workers with it
            )
        os.close(write)
        self._answers = os.fdopen(read, "rb")
        self._buffer = b""
        self.failed = False
        self.planted: str | None = None
        self._examples = 0
        try:
            self.info = self._answer(*timeout("start"), "start")["ready"]
        except BaseException:
            self.close()
            raise

    def run(self, scenario: Scenario, target_of: str | None = None) -> Generated:
        """Load ``scenario``'s weights, generate greedily for its prompts, collect the probe's records.

        An engine without speculation serves the target that ``scenario`` gives the method ``target_of``."""
        began = time.monotonic()
        self._examples += 1
        shutil.rmtree(self.dir / f"example{self._examples - 1}", ignore_errors=True)  # read by now: disk stays flat
        folder = self.dir / f"example{self._examples}"
        files = write_plan(folder, scenario, self.spec.method or target_of)
        draft = str(files["draft"]) if self.spec.method and "draft" in files else None
        pattern = str(folder / "rank{rank}.safetensors") if self.spec.method else ""
        self._request({"op": "load", "target": str(files["target"]), "draft": draft, "records": pattern})
        ranks = None if not pattern else [Path(pattern.format(rank=r)) for r in range(self.spec.tp)]
        try:
            answer = self._request(
                {"op": "generate", "prompts": scenario.prompts, "max_tokens": scenario.max_tokens, "records": pattern}
            )
        except EngineFailed as failed:
            written = [path for path in ranks or () if path.exists()]  # a proposal that raised wrote them
            if not written:
                raise
            seconds = time.monotonic() - began
            died = Generated(self.spec, scenario, [], [], {}, written, seconds, self.planted)
            raise EngineDied(str(failed), died) from None
        return Generated(
            self.spec,
            scenario,
            answer["outputs"],
            answer["request_ids"],
            answer["counters"],
            ranks,
            time.monotonic() - began,
            self.planted,
        )

    @property
    def broken(self) -> bool:
        """Whether this engine failed or ended: one that did is never asked again (the pool starts another)."""
        return self.failed or self.proc.poll() is not None

    def plant(self, name: str | None) -> list[str | None]:
        """Put a broken local path (``tests.broken_engine``) into every worker; None takes it back."""
        done = self._request({"op": "plant", "name": name})["planted"]
        self.planted = name
        return done

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.proc.poll() is not None:
            raise EngineFailed(self._why(f"is not running (exit status {self.proc.returncode})"))
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:
            raise EngineFailed(self._why(f"stopped reading requests ({exc})")) from None
        return self._answer(*timeout("call"), message["op"])

    def _answer(self, seconds: float, setting: str, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                why = self._why(f"gave no answer to {what} within {seconds:.0f} s ({setting})")
                self.close()
                raise EngineFailed(why)
            ready, _, _ = select.select([self._answers], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._answers.fileno(), 1 << 20)
                if not chunk:
                    status = self.proc.wait()
                    raise EngineFailed(self._why(f"ended during {what} (exit status {status})"))
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer = json.loads(line)
        if "error" in answer:
            raise EngineFailed(self._why(f"refused {what}:\n{answer['error'].rstrip()}"))
        return answer

    def _why(self, what: str, lines: int = 25) -> str:
        self.failed = True  # close() keeps the folder: the log and the example that broke it
        try:
            tail = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        shown = "\n".join(f"  | {line}" for line in tail)
        return f"vLLM engine {self.spec.name} {what}; the last lines of its log ({self.log}):\n{shown}"

    def close(self, keep_failed: bool = True) -> None:
        """Ask a working host to leave, then end its process group whatever it did; remove its folder (not after a
        failure, unless ``keep_failed`` is False: the log and the example that broke it stay, and the error names the
        log)."""
        if self.proc.poll() is None and not self.failed:
            try:
                self.proc.stdin.write(b'{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the workers too, whether or not the host left
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._answers.close()
        if not (self.failed and keep_failed) and not os.environ.get("TPARGMAX_E2E_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
