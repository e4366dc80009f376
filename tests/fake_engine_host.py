"""A stand-in for ``engines.vllm.e2e.host`` that needs no vLLM: it speaks the host's protocol and misbehaves on demand.

``TPARGMAX_FAKE_HOST`` says how: ``serve`` (answers every request; ``generate`` returns each prompt back and no
records), ``hang`` (never answers), ``die`` (exits at once), ``hang_generate`` (starts, then never answers a
generate), ``die_generate`` (answers a generate as vLLM's dead engine does, after writing rank 0's records where
asked, and exits).  Like vLLM it starts a worker of its own (a sleeping child) and writes that child's pid to
``TPARGMAX_FAKE_WORKER_PID``, so a test can see that no process outlives the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    mode = os.environ["TPARGMAX_FAKE_HOST"]
    out = os.fdopen(int(argv[1]), "w", buffering=1)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(os.environ["TPARGMAX_FAKE_WORKER_PID"], "w") as f:
        f.write(str(worker.pid))
    print("fake engine: starting", flush=True)
    if mode == "die":
        print("fake engine: giving up", flush=True)
        return 3
    if mode == "hang":
        time.sleep(3600)
    out.write(json.dumps({"ready": [{"rank": 0}]}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            return 0
        if request["op"] == "generate" and mode == "hang_generate":
            time.sleep(3600)
        if request["op"] == "generate" and mode == "die_generate":
            if request["records"]:
                with open(request["records"].format(rank=0), "w") as f:
                    f.write("what the probe wrote before the proposal raised")
            out.write(json.dumps({"error": "EngineDeadError: EngineCore encountered an issue", "dead": True}) + "\n")
            return 1
        if request["op"] == "generate":
            answer = {"outputs": request["prompts"], "request_ids": [str(i) for i in range(len(request["prompts"]))]}
            answer |= {"counters": {"drafts": 0, "draft_tokens": 0, "accepted": 0}, "steps": None}
        elif request["op"] == "plant":
            answer = {"planted": [request["name"]]}
        else:
            answer = {"ok": True}
        out.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
