"""``python -m engines.vllm.e2e.host SPEC FD``: one vLLM engine, driven by JSON lines (requests on stdin, answers on
file descriptor FD; vLLM's own output goes to stdout and stderr, which the driver keeps as the engine's log).

SPEC is a JSON object: the models' folders, tp, the switch, the dtype and the method (null: the target alone).  The
host answers ``{"ready": ...}`` once the engine is up, then one answer per request: ``load`` (an example's tensors),
``generate`` (greedy, every prompt; the outputs, the speculative counters' increase and the probe's records, written
per rank), ``plant`` and ``quit``.  An error is answered as ``{"error": ...}`` and the engine stays up, but for a
``generate``: vLLM's engine does not outlive a step that raised, so the host answers ``{"error": ..., "dead":
true}``, and ends (the probe has written what the heads returned).  It ends its whole process group (the engine's
workers included) whenever it ends itself, and when its driver goes away.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

COUNTERS = {  # vLLM's speculative-decoding counters (LLM.get_metrics), by the name the suite gives them
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
}
KV_CACHE_BYTES = 64 << 20  # a few thousand tokens of the tiny models' cache: plenty, and little memory


def end_group() -> None:
    """End this process group, vLLM's engine and workers with it, where the host leads it (the driver starts it in a
    session of its own)."""
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)


def orphan_watch() -> None:
    """End the process group if the driver dies: a stuck engine must not outlive the run."""
    parent = os.getppid()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            end_group()


def engine(spec: dict[str, Any]) -> Any:
    from vllm import LLM

    from engines.vllm.e2e.scenario import HETERO, VLLM_METHOD

    speculative = None
    if spec["method"] is not None:
        speculative = {
            "method": VLLM_METHOD.get(spec["method"], spec["method"]),
            "model": spec["draft"],
            "num_speculative_tokens": spec["num_speculative_tokens"],
            "use_local_argmax_reduction": spec["switch"],
            "draft_tensor_parallel_size": spec["tp"],
        }
        if spec["method"] == HETERO:  # the draft's own tokenizer, its picks mapped to the target's ids
            speculative["use_heterogeneous_vocab"] = True
    return LLM(
        model=spec["target"],
        tensor_parallel_size=spec["tp"],
        dtype=spec["dtype"],
        skip_tokenizer_init=True,
        enforce_eager=True,
        seed=0,
        disable_log_stats=False,  # the speculative counters are statistics
        enable_prefix_caching=False,  # a cached prefix would hold the previous example's weights
        kv_cache_memory_bytes=KV_CACHE_BYTES,
        max_model_len=spec["max_len"],
        max_num_seqs=spec["max_num_seqs"],
        worker_extension_cls="engines.vllm.e2e.worker.Probe",
        speculative_config=speculative,
    )


def counters(llm: Any) -> dict[str, int]:
    found = {m.name: m for m in llm.get_metrics()}
    return {key: int(getattr(found[name], "value", 0)) if name in found else 0 for key, name in COUNTERS.items()}


def serve(llm: Any, request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "load":
        llm.collective_rpc("tpargmax_load", args=(request["target"], request.get("draft"), request["records"]))
        return {"ok": True}
    if op == "plant":
        return {"planted": llm.collective_rpc("tpargmax_plant", args=(request["name"],))}
    if op == "generate":
        from vllm import SamplingParams

        before = counters(llm)
        params = SamplingParams(temperature=0.0, max_tokens=request["max_tokens"], ignore_eos=True)
        prompts = [{"prompt_token_ids": list(p)} for p in request["prompts"]]
        outputs = llm.generate(prompts, params, use_tqdm=False)
        after = counters(llm)
        steps = llm.collective_rpc("tpargmax_take", args=(request["records"],)) if request["records"] else None
        return {
            "outputs": [list(o.outputs[0].token_ids) for o in outputs],
            "request_ids": [o.request_id for o in outputs],
            "counters": {k: after[k] - before[k] for k in after},
            "steps": steps,
        }
    raise ValueError(f"unknown request {op!r}")


def main(argv: list[str]) -> int:
    """Serve the driver's requests; however this ends (quit, the driver gone, an error), vLLM's processes end with it:
    they are in this process group, and vLLM's own shutdown does not always reach them (a driver killed mid-run left
    its engines' workers running)."""
    try:
        return serve_requests(argv)
    finally:
        sys.stdout.flush()
        end_group()


def serve_requests(argv: list[str]) -> int:
    spec, out = json.loads(argv[0]), os.fdopen(int(argv[1]), "w", buffering=1)
    threading.Thread(target=orphan_watch, daemon=True).start()

    def answer(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")

    try:
        llm = engine(spec)
        probes = llm.collective_rpc("tpargmax_install")
    except BaseException:  # noqa: BLE001 - the driver shows it, with the log
        answer({"error": traceback.format_exc(limit=8)})
        return 1
    answer({"ready": probes})
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        try:
            answer(serve(llm, request))
        except Exception:  # noqa: BLE001 - one failed request is reported; the engine stays up for the next
            dead = request["op"] == "generate"
            answer({"error": traceback.format_exc(limit=8), **({"dead": True} if dead else {})})
            if dead:
                return 1
    answer({"bye": True})
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
