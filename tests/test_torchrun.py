"""The property suite as a torchrun job: two launchers on the loopback address as two hosts (``--nnodes 2``, c10d
rendezvous, one gloo rank each), as a multi-node TP group runs: rank 0 draws, both ranks compute.  A node lost
mid-run is a clear failure within the timeout, and no process of either node outlives the test.  (``--standalone``
on one host runs the same code under torch's own single-node launcher.)"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import uuid

from tests.forked_runs import popen
from tests.suite import ROOT, process_state

TIMEOUT = 240  # seconds for the whole job; the collective timeout below bounds a lost node's wait


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(group: int) -> list[int]:
    """Processes of process group ``group`` that have not ended (zombies waiting for a parent excepted)."""
    states = {int(pid): process_state(int(pid)) for pid in os.listdir("/proc") if pid.isdigit()}
    return [pid for pid, state in states.items() if state is not None and state[1] == group and state[0] != "Z"]


def two_nodes(*args: str) -> list[tuple[int, str]]:
    """``properties.torchrun ARGS`` on two one-rank nodes; each node's exit status and output."""
    endpoint, job = f"127.0.0.1:{_free_port()}", uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="tpargmax-nodes-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TPARGMAX_")}
        env |= {"TPARGMAX_REPRO_DIR": os.path.join(tmp, "repro"), "TPARGMAX_DB": os.path.join(tmp, "examples")}
        env["TMPDIR"] = tmp  # torchrun's agents leave their torchelastic_* folders there, not in /tmp
        nodes = []
        for host in (1, 0):  # the rendezvous host is node 0, as the first host of a real job
            launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
            launcher += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", job]
            launcher += ["--rdzv-conf", f"is_host={host}", "--local-addr", "127.0.0.1", "--max-restarts", "0"]
            command = [*launcher, "-m", "properties.torchrun", "-q", "--hypothesis-profile", "ci", *args]
            out = open(os.path.join(tmp, f"node{1 - host}.log"), "w+")  # noqa: SIM115 - closed below
            launched = popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            nodes.append((launched, out))
        try:
            results = []
            for proc, out in nodes:
                code = proc.wait(TIMEOUT)
                out.seek(0)
                results.append((code, out.read()))
            return results
        finally:
            for proc, out in nodes:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):  # the group may end between the poll and the kill
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                out.close()
            assert [pid for proc, _ in nodes for pid in _alive(proc.pid)] == []  # nothing outlives the job


OPTIONS = ["--max-examples", "10", "--collective-timeout", "20", "properties/test_equivalence.py", "-k", "token_exact"]


def _driver_and_other(results: list[tuple[int, str]]) -> tuple[tuple[int, str], tuple[int, str]]:
    """The node whose rank 0 ran pytest (the rendezvous may put it on either), then the other."""
    (driver,) = [r for r in results if "short test summary" in r[1]]
    (other,) = [r for r in results if r is not driver]
    return driver, other


def test_a_tp_group_spans_two_nodes():
    """One job of two hosts' ranks: a built-in local path passes, and a broken implementation fails for its rule,
    argmax and top-k alike.  (One built-in: the job runs the same rank code for any; each example crosses the
    control channel, and two rank processes and two launchers already cost 20 s of CPU on a slow 2-core machine.)"""
    impls = "vllm_pairs,tests.broken:highest_rank_wins"
    files = ["properties/test_equivalence.py", "properties/test_top_k.py"]
    selected = "not tp_invariance and (not highest_rank_wins or token_exact)"
    options = ["--max-examples", "10", "--collective-timeout", "20", *files, "-k", selected]
    (code, out), other = _driver_and_other(two_nodes("--impl", impls, *options))
    assert code == 1, out[-3000:]
    # pytest may append the message to each summary line (always under CI): compare the test ids
    failed = [line.split(" - ")[0] for line in out.splitlines() if line.startswith("FAILED ")]
    assert failed == [f"FAILED properties/test_equivalence.py::test_token_exact[{impls.split(',')[-1]}-torchrun]"]
    assert "[tie across ranks resolved to the higher rank]" in out, out[-3000:]
    assert "on the torchrun job's group of tp=2" in out and " passed" in out, out[-3000:]
    # The other node served every task and ended when told.  Its launcher's status can be 1 all the same: a failing
    # rank 0 ends the driver's launcher at once (torchrun's agent waits at its exit barrier only on success), and
    # with it the rendezvous store, which the other launcher may still poll while its rank ends (seen in a full run).
    assert re.search(r"rank 1 ran [1-9]\d* tasks and stopped when told", other[1]), other[1][-3000:]
    assert other[0] == 0 or (other[0] == 1 and "The connection to the C10d store has failed" in other[1]), other


def test_a_node_lost_mid_run_is_a_clear_failure():
    (code, out), other = _driver_and_other(two_nodes("--impl", "tests.broken:node_one_goes_down", *OPTIONS))
    assert code == 1, out[-3000:]
    assert "[rank process ended: torchrun job of 2 (gloo): a rank stopped answering" in out, out[-3000:]
    assert other[0] == -signal.SIGKILL, other[1][-3000:]  # the lost node's launcher, killed with its rank
