"""SGLang 0.5.23's greedy paths over a vocab-parallel LM head at tp 2: DFlash's draft samplers, Domino's first
token, the DP-attention head's gather (``--enable-dp-lm-head``) and DFlash2's selector walk.

Six defects, each on one row a full-vocabulary ``torch.argmax`` answers, or (the selector) where ranks must agree:

* a rank whose shard holds no base ids (a small vocabulary padded to 64 x tp) raises in ``_DflashDraftSampler``
  and ``_domino_tp_first_ids``: ``torch.max`` over no columns;
* the eager sampler (``DFlashWorkerV2._greedy_sample_from_vocab_parallel_head``) breaks a tie across ranks by rank,
  so a lower rank's added id beats a higher rank's smaller base id;
* the eager sampler returns a padding id on an all -inf row: a rank without base ids offers ``finfo.min``;
* ``LogitsProcessor._gather_attn_tp_logits`` sizes each shard as ``vocab_size // tp``: on a vocabulary whose shards
  carry padding (250 ids, shards of 128), the gather is handed tensors of other sizes, which NCCL refuses (the two
  threads check sizes as NCCL does: ``numel`` for ``all_gather_into_tensor``, each output the input's size for
  ``all_gather``; gloo, stricter, refuses even the unpadded case's stacked output);
* DFlash2's ``CandidateSelector`` walks lattice scores each rank computes from its own copy of the hidden states
  (replicated codebooks), and nothing broadcasts the proposals: two ranks whose copies differ by a few ulps propose
  different tokens (here the codebooks make the pairwise term each rank's own logit of the candidate);
* ``candidate_topk`` takes K candidates from each rank's shard: a rank with fewer than K base ids raises.

Standalone: needs torch and the sglang 0.5.23 wheel (``pip install --no-deps sglang==0.5.23``), no GPU.  The
wheel's class and functions are taken from its files (parsed, SGLang's imports left out, so its dependencies are
not needed); two threads are the two ranks.  Exit status 1 while any of the six is there, 0 once none is.  Exit 2,
with one line saying what is missing, means it cannot be judged here: the wheel or torch is not installed.

    python greedy_paths.py
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import threading
import types
from pathlib import Path

torch = None  # imported once cannot_judge() has found it: saying what is missing takes no torch import

UNJUDGED = "greedy_paths: cannot be judged here: "  # exit 2, one line: what this machine lacks
NEEDS = {"torch": "torch", "sglang": "the sglang 0.5.23 wheel (pip install --no-deps sglang==0.5.23)"}
WORKER = "srt/speculative/dflash_worker_v2.py"
LOGITS = "srt/layers/logits_processor.py"
MODELS = "srt/models/dflash.py"
DOMINO = "srt/speculative/domino_utils.py"
NEG_INF = float("-inf")


def cannot_judge() -> str | None:
    missing = [what for name, what in NEEDS.items() if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def from_wheel(rel: str, names: set[str], **given) -> dict:
    """The wheel file's top-level classes and functions in ``names`` (``Class.method``: that method alone, in a
    class of no base), run without its ``sglang`` imports; SGLang's names it calls come from ``given``."""
    path = Path(importlib.util.find_spec("sglang").origin).parent / rel
    body = []
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names:
            if isinstance(node, ast.FunctionDef):
                node.decorator_list = []  # @torch.compile: run eagerly
            body.append(node)
        elif isinstance(node, ast.ClassDef):
            methods = [m for m in node.body if isinstance(m, ast.FunctionDef) and f"{node.name}.{m.name}" in names]
            if methods:
                bare = ast.ClassDef(name=node.name, bases=[], keywords=[], body=methods, decorator_list=[])
                body.append(ast.copy_location(bare, node))
    namespace = {"torch": torch, **given}
    exec(compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), str(path), "exec"), namespace)
    return namespace


class Group:
    """Two ranks in two threads: SGLang's ``all_gather_into_tensor`` (every rank's tensor, flat in rank order)."""

    def __init__(self, world_size: int) -> None:
        self.world_size, self.slots = world_size, [None] * world_size
        self.barrier, self.local = threading.Barrier(world_size, timeout=30), threading.local()

    def all_gather_into_tensor(self, out, tensor) -> None:
        if out.numel() != self.world_size * tensor.numel():
            raise RuntimeError("output tensor size must be equal to world_size times input tensor size")
        self.slots[self.local.rank] = tensor.clone()
        self.barrier.wait()
        out.copy_(torch.cat([slot.reshape(-1) for slot in self.slots]).reshape(out.shape))
        self.barrier.wait()

    def all_gather(self, outputs, tensor) -> None:
        if any(out.shape != tensor.shape for out in outputs):
            raise RuntimeError("all_gather: every output tensor must have the input's size")
        self.slots[self.local.rank] = tensor.clone()
        self.barrier.wait()
        for out, slot in zip(outputs, self.slots, strict=True):
            out.copy_(slot)
        self.barrier.wait()

    def cat(self, tensor, dim: int = -1):
        """``tensor_model_parallel_all_gather``: every rank's tensor, concatenated along ``dim`` in rank order."""
        self.slots[self.local.rank] = tensor.clone()
        self.barrier.wait()
        slots = list(self.slots)
        self.barrier.wait()
        return torch.cat(slots, dim=dim)

    def run(self, call) -> list:
        """``call(rank)`` on every rank at once; what each returned (or raised)."""
        results = [None] * self.world_size

        def one(rank: int) -> None:
            self.local.rank = rank
            try:
                results[rank] = call(rank)
            except Exception as exc:  # noqa: BLE001 - shown as the rank's outcome
                results[rank] = exc
                self.barrier.abort()  # the other rank's collective fails at once rather than waiting

        threads = [threading.Thread(target=one, args=(r,)) for r in range(self.world_size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results


def head(logits: list[float]):
    """A shard whose logits on the hidden state ``[[1.0]]`` are ``logits``: one feature, the weights the logits."""
    return torch.tensor(logits, dtype=torch.float32).unsqueeze(1)


def empty_shard() -> bool:
    """Vocabulary 7 at tp 2, padded to 64: rank 0 holds ids 0..6 (then padding), rank 1 ids 32..63, all padding."""
    worker = from_wheel(WORKER, {"_DflashDraftSampler"})
    domino = from_wheel(DOMINO, {"_domino_tp_first_ids"})
    base = [[0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0], []]  # each rank's base logits on the row: id 2 is the maximum

    def graph(group: Group, rank: int) -> int:
        sampler = worker["_DflashDraftSampler"](
            weight=head(base[rank] + [0.0] * (32 - len(base[rank]))),
            block_size=2,
            num_org=len(base[rank]),
            org_vocab_start=32 * rank,
            max_bs=1,
            tp_group=group,
        )
        sampler(torch.ones(2, 1))  # a block of two rows: the first (the bonus token's) is dropped
        return int(sampler.out[0])

    def first_ids(group: Group, rank: int) -> int:
        logits = torch.tensor([base[rank] + [0.0] * (32 - len(base[rank]))])
        pick = domino["_domino_tp_first_ids"]
        return int(pick(logits, org_vocab_start=32 * rank, num_org=len(base[rank]), tp_group=group)[0])

    failed = False
    for name, call in (("_DflashDraftSampler", graph), ("_domino_tp_first_ids", first_ids)):
        group = Group(2)
        got = group.run(lambda rank, group=group, call=call: call(group, rank))
        print(f"{name}, rank 1 without base ids: {shown(got)} on ranks 0, 1 (torch.argmax: 2)")
        failed |= got != [2, 2]
    return failed


def eager(shards: list[dict]) -> list:
    """The eager sampler on every rank of ``shards`` (its base and added logits, its shard indices)."""
    group = Group(len(shards))
    parallel = types.SimpleNamespace(tp_group=group)
    worker = from_wheel(
        WORKER,
        {"DFlashWorkerV2._greedy_sample_from_vocab_parallel_head"},
        get_parallel=lambda: parallel,
        is_dense_head_weight=lambda w: w is not None and w.dtype in (torch.float16, torch.bfloat16, torch.float32),
    )["DFlashWorkerV2"]

    def rank(r: int):
        self = worker()
        for name in (
            "gathered_max",
            "gathered_ids",
            "local_max",
            "local_arg",
            "best_rank",
            "rank_index",
            "selected_ids",
        ):
            setattr(self, f"_draft_greedy_{name}_buf", None)
        self._draft_greedy_gather_cap = self._draft_greedy_local_cap = self._draft_greedy_index_cap = 0
        s = shards[r]
        indices = types.SimpleNamespace(**{k: v for k, v in s.items() if k != "logits"})
        lm_head = types.SimpleNamespace(weight=head(s["logits"]), shard_indices=indices)
        out = self._greedy_sample_from_vocab_parallel_head(hidden_states=torch.ones(1, 1), lm_head=lm_head)
        return int(out[0])

    return group.run(rank)


def shard(start: int, base: list[float], padded: int, added_start: int, added: list[float]) -> dict:
    logits = base + [0.0] * (padded - len(base)) + added
    return {
        "logits": logits,
        "num_org_elements": len(base),
        "num_org_elements_padded": padded,
        "num_added_elements": len(added),
        "org_vocab_start_index": start,
        "added_vocab_start_index": added_start,
    }


def dp_head(vocab: int, width: int) -> list:
    """The gather at tp 2 on shards of ``width`` columns (ids ``[r * width, (r + 1) * width)``, each logit its id,
    padding past ``vocab`` at -inf), then ``torch.argmax``: what each rank returns (or raises)."""
    group = Group(2)
    gather = from_wheel(
        LOGITS,
        {"LogitsProcessor._gather_attn_tp_logits"},
        attn_tp_all_gather_into_tensor=group.all_gather_into_tensor,
        attn_tp_all_gather=lambda outputs, tensor: group.all_gather(outputs, tensor),
    )["LogitsProcessor"]._gather_attn_tp_logits
    processor = types.SimpleNamespace(vocab_size=vocab, attn_tp_size=2)

    def rank(r: int):
        ids = torch.arange(r * width, (r + 1) * width, dtype=torch.float32)
        logits = torch.where(ids < vocab, ids, NEG_INF).unsqueeze(0)
        return int(torch.argmax(gather(processor, logits), dim=-1)[0])

    return group.run(rank)


def selector(group: Group) -> dict:
    """DFlash2's candidate top-k, lattice and walk from the wheel, over ``group`` (rank-aware stand-ins)."""
    from typing import Optional

    return from_wheel(
        MODELS,
        {
            "_radix_topk",
            "_project_candidate_logits",
            "candidate_topk",
            "_score_edges",
            "_follow_maps",
            "CandidateSelector",
        },
        nn=torch.nn,
        F=torch.nn.functional,
        Tuple=tuple,
        Optional=Optional,
        logger=types.SimpleNamespace(warning=lambda *args: None),
        _flashinfer_top_k=None,
        selector_walk_triton=None,
        get_parallel=lambda: types.SimpleNamespace(tp_size=group.world_size),
        tensor_model_parallel_all_gather=group.cat,
        should_apply_lm_head_quant_method=lambda lm_head, quant_method: False,
        is_dense_head_weight=lambda w: True,
    )


def walk(weights: list[list[float]], copies: list[list[float]], k: int) -> list:
    """Each rank's first proposal: its shard ``weights`` (4 base ids a rank, 2 features), its copy of one row's
    hidden state, ``k`` candidates; codebooks A = 1, B = the head's rows, the identity projection."""
    group = Group(2)
    wheel = selector(group)
    full = torch.tensor(weights)

    def rank(r: int):
        shard = full[4 * r : 4 * r + 4]
        lm_head = types.SimpleNamespace(
            weight=shard,
            org_vocab_size=8,
            shard_indices=types.SimpleNamespace(num_org_elements=4, org_vocab_start_index=4 * r),
        )
        hidden = torch.tensor([copies[r]])
        ids, vals, _ = wheel["candidate_topk"](hidden, lm_head, k)
        chooser = wheel["CandidateSelector"](hidden_size=2, vocab_size=8, state_rank=2, top_k=k)
        with torch.no_grad():
            chooser.predecessor_codebook.fill_(1.0)
            chooser.successor_codebook.copy_(full)
            chooser.hidden_projection.weight.copy_(torch.eye(2))
        scores = chooser.build_lattice(
            candidate_ids=ids[:, None],
            unary_logits=vals.float()[:, None],
            hidden_states=hidden[:, None],
            anchor_token_ids=torch.zeros(1, dtype=torch.long),
        )
        tokens, _ = chooser.sample_path(
            candidate_ids=ids[:, None],
            scores=scores,
            uniforms=torch.zeros(1, 1),
            temperatures=torch.ones(1),
            greedy_mask=torch.ones(1, dtype=torch.bool),
        )
        return int(tokens[0, 0])

    return group.run(rank)


def shown(results: list) -> list:
    return [f"{type(r).__name__}: {r}" if isinstance(r, Exception) else r for r in results]


def main() -> int:
    global torch
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    import torch

    failed = empty_shard()
    # base ids 0..127 (64 a rank), added ids 128..143 (8 a rank); id 70 (rank 1) and id 128 (rank 0's added) at 5
    tie = [
        shard(0, [0.0] * 64, 64, 128, [5.0] + [0.0] * 7),
        shard(64, [0.0] * 6 + [5.0] + [0.0] * 57, 64, 136, [0.0] * 8),
    ]
    got = eager(tie)
    print(f"eager sampler, ids 70 and 128 tied at the maximum: {got} on ranks 0, 1 (torch.argmax: 70)")
    failed |= got != [70, 70]
    # base ids 0..63 on rank 0, none on rank 1 (64..127 padding); every logit -inf
    masked = [shard(0, [NEG_INF] * 64, 64, 128, []), shard(64, [], 64, 128, [])]
    masked[1]["logits"] = [NEG_INF] * 64
    got = eager(masked)
    print(f"eager sampler, an all -inf row, rank 1 without base ids: {got} on ranks 0, 1 (torch.argmax: 0)")
    failed |= got != [0, 0]
    for vocab, width in ((256, 128), (250, 128)):  # 250 ids pad to 256: shards of 128, vocab // tp = 125
        got = dp_head(vocab, width)
        print(f"DP-attention head gather, {vocab} ids in shards of {width}: {shown(got)} (torch.argmax: {vocab - 1})")
        failed |= got != [vocab - 1] * 2
    # ids 1 (rank 0) and 5 (rank 1) read one feature each; each rank's copy is 4 ulps low on the other's feature
    # (the sum of two logits near 1 rounds to 2**-23: a 1-ulp nudge would round away)
    weights = [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    below = 1.0 - 2.0**-22
    got = walk(weights, [[1.0, below], [below, 1.0]], 4)
    print(f"DFlash2 selector walk, ids 1 and 5 tied, copies 4 ulps apart: {shown(got)} on ranks 0, 1 (one token)")
    failed |= len(set(got)) != 1
    got = walk(weights, [[1.0, 1.0], [1.0, 1.0]], 8)
    print(f"DFlash2 candidate_topk, 8 candidates from shards of 4 base ids: {shown(got)} (torch.argmax: 1)")
    failed |= got != [1, 1]
    print("DEFECTS SHOWN" if failed else "all six agree with torch.argmax")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
