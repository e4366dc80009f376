"""vllm-ascend 0.23.0.post1's reduce-sample paths (``enable_reduce_sample``): every TP rank keeps its own shard of
the logits, cut by ``AscendLogitsProcessor._get_logits_normal`` to ``lm_head.num_org_embeddings_per_partition``
columns (its base ids), and each sampling decision reduces over ranks.

Nine defects, each on the smallest case a full-vocabulary ``torch.argmax`` (or the classic, unsharded top-k/top-p:
the same function's branch without the switch, on the whole vocabulary) answers:

1. the three ``greedy_sample`` copies (``sample/sampler.py`` ``AscendSampler.greedy_sample``,
   ``sample/rejection_sampler.py`` and ``spec_decode/llm_base_proposer.py``) map a local index to
   ``local + rank * V_local`` (lines 117, 271, 126) with ``V_local`` the rank's own, cut width: on a narrower last
   rank the id is wrong (vocabulary 100 at tp 2: shards of 64, rank 1 holds ids 64..99 in 36 columns, id 99
   comes back as 35 + 36 = 71);
2. a rank holding no base ids (vocabulary 7 at tp 2: padded to 64, rank 1 holds none) raises in each copy:
   ``logits.max(dim=-1)`` over no columns;
3. the rejection sampler's greedy rows beside a sampled row: with the switch ``apply_sampling_constraints``
   (rejection_sampler.py line 347) returns ``_apply_top_k_top_p_pytorch``'s gathered candidate values and ids, and
   ``rejection_sample`` takes ``greedy_sample(target_logits)`` (line 469) on the candidate VALUES, never mapping the
   column through the ids (line 395 unpacks them as ``target_indices``): the token is a column index;
4. ``_apply_top_k_top_p_pytorch`` (sampler.py line 194) on a batch mixing a row with top-k and one without (vLLM
   hands k = the vocabulary size; the model runner passes top_k = the largest k below the rank's width):
   ``kk = k.clamp(max=V_local)`` (line 221), ``top_k_count = candidates - kk`` (line 222) is negative and
   ``probs_sort.gather`` (line 223) raises;
5. the same function on ranks of different widths with top_k None: each rank's ``torch.topk`` takes its own width
   (line 210) and the all-gather (line 212) is handed tensors of different shapes, which a collective refuses;
6. the same function treats a top-k at or above the rank's width but below the vocabulary as no top-k
   (``no_top_k_mask = kk == V_local``, line 224): the row keeps every gathered candidate (k 200 at width 128 beside
   a row of k 127, so top_k 127: 254 kept, not 200; beside a row of k 2 it raises as in 4);
7. the cut keeps a rank's base ids alone (``_get_logits_normal``, vocab_parallel_embedding.py line 339): an added id
   (a head whose ``num_embeddings`` exceeds ``org_num_embeddings``) never competes (128 base ids and 8 added at tp 2:
   the row's maximum at added id 130 comes back as a base id);
8. with top-k and top-p on one row, the branch cuts top-p on the softmax of every gathered candidate (line 218),
   before the row's top-k (lines 220-227): the nucleus is measured against candidates top-k drops, where vLLM's
   ``apply_top_k_top_p`` and the contract measure it on what top-k kept (here computed in float64, on the whole
   vocabulary);
9. the cut keeps every base id of the head, not the logits processor's vocabulary: where a model builds its
   ``LogitsProcessor`` with fewer ids than its head's base ids (``org_vocab_size``, which the gathered path cuts to),
   an id at or above it competes (128 base ids, a logits vocabulary of 100 at tp 2: the row's maximum at id 110 is
   returned, where the classic path picks among ids 0..99).

Standalone: needs torch and vllm-ascend's source (an extracted sdist or a checkout, no NPU, no vllm).  The named
functions are taken from its files (parsed with ``ast``, their imports left out; the names they use are given:
``get_tp_group``, ``get_ascend_config`` with ``enable_reduce_sample=True``, a silent ``logger``).  Threads are the
ranks; their group offers vLLM's ``GroupCoordinator.all_gather(tensor, dim=-1)`` and, like a real collective,
refuses tensors whose shapes differ across ranks.  Exit status 1 while any of the nine is there, 0 once none is.
Exit 2, with one line saying what is missing, means it cannot be judged here (source not found, torch missing).

    python reduce_paths.py [SOURCE]   # SOURCE: the folder holding vllm_ascend/; else $VLLM_ASCEND_SRC; else the
                                      # installed vllm_ascend package (found, never imported)
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import threading
import types
import warnings
from pathlib import Path

torch = None  # imported once cannot_judge() has found it and the source

UNJUDGED = "reduce_paths: cannot be judged here: "  # exit 2, one line: what this machine lacks
SAMPLER = "vllm_ascend/sample/sampler.py"
REJECTION = "vllm_ascend/sample/rejection_sampler.py"
PROPOSER = "vllm_ascend/spec_decode/llm_base_proposer.py"
EMBEDDING = "vllm_ascend/ops/vocab_parallel_embedding.py"
NAMES = {
    SAMPLER: {"AscendSampler.greedy_sample", "_apply_top_k_top_p_pytorch"},
    REJECTION: {"greedy_sample"},
    PROPOSER: {"greedy_sample"},
    EMBEDDING: {"AscendLogitsProcessor._get_logits_normal"},
}
ROOT: Path | None = None
REDUCE, CLASSIC = types.SimpleNamespace(enable_reduce_sample=True), types.SimpleNamespace(enable_reduce_sample=False)
SILENT = types.SimpleNamespace(**{m: lambda *a, **k: None for m in ("debug", "debug_once", "info", "info_once")})
SILENT.warning_once = SILENT.debug
CONFIG = {"get_ascend_config": lambda: REDUCE}
EMBED: dict = {}  # AscendLogitsProcessor, once torch is imported
NEG_INF = float("-inf")


def source_root() -> tuple[Path | None, str]:
    """SOURCE, else $VLLM_ASCEND_SRC, else the installed package's parent folder (find_spec imports nothing)."""
    if len(sys.argv) > 1:
        return Path(sys.argv[1]), f"SOURCE {sys.argv[1]}"
    if os.environ.get("VLLM_ASCEND_SRC"):
        return Path(os.environ["VLLM_ASCEND_SRC"]), f"VLLM_ASCEND_SRC={os.environ['VLLM_ASCEND_SRC']}"
    try:
        spec = importlib.util.find_spec("vllm_ascend")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, "no SOURCE argument, no VLLM_ASCEND_SRC, no installed vllm_ascend package"
    return Path(next(iter(spec.submodule_search_locations))).parent, "the installed vllm_ascend package"


def defined(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{m.name}" for m in node.body if isinstance(m, ast.FunctionDef)}
    return names


def cannot_judge() -> str | None:
    global ROOT
    ROOT, where = source_root()
    if ROOT is None:
        return f"vllm-ascend source not found ({where})"
    for rel, names in NAMES.items():
        path = ROOT / rel
        if not path.is_file():
            return f"{rel} not found under {ROOT} ({where})"
        try:
            missing = names - defined(ast.parse(path.read_text(), filename=str(path)))
        except (SyntaxError, UnicodeDecodeError, OSError) as exc:
            return f"{path} cannot be parsed ({type(exc).__name__})"
        if missing:
            return f"{path} defines no {', '.join(sorted(missing))}"
    return None if importlib.util.find_spec("torch") is not None else "torch not installed"


def from_source(rel: str, names: set[str], **given) -> dict:
    """The file's top-level functions in ``names`` (``Class.method``: that method alone, in a class of no base),
    run without the file's imports (vllm, vllm_ascend, torch_npu) and annotations (they name vllm's classes);
    the names the functions use come from ``given``."""
    path = ROOT / rel
    body = []
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.decorator_list = []
            body.append(node)
        elif isinstance(node, ast.ClassDef):
            methods = [m for m in node.body if isinstance(m, ast.FunctionDef) and f"{node.name}.{m.name}" in names]
            if methods:
                bare = ast.ClassDef(name=node.name, bases=[], keywords=[], body=methods, decorator_list=[])
                body.append(ast.copy_location(bare, node))
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.FunctionDef):
            node.returns = None
            for arg in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
                arg.annotation = None
    namespace = {"torch": torch, "get_tp_group": lambda: CURRENT.group, "logger": SILENT, **given}
    exec(compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), str(path), "exec"), namespace)
    return namespace


CURRENT = threading.local()  # the calling thread's group: what get_tp_group() returns


class Refused(RuntimeError):
    """A collective's refusal: every rank raises it, so no rank is left waiting."""


class Group:
    """TP ranks in threads, with the part of vLLM's ``GroupCoordinator`` the reduce paths use."""

    def __init__(self, world_size: int) -> None:
        self.world_size, self.slots = world_size, [None] * world_size
        self.barrier, self.local = threading.Barrier(world_size, timeout=30), threading.local()

    @property
    def rank_in_group(self) -> int:
        return self.local.rank

    def all_gather(self, tensor, dim: int = -1):
        """Every rank's tensor concatenated along ``dim`` in rank order; refused when shapes differ (as HCCL and
        NCCL refuse: their all-gather needs one size on every rank)."""
        self.slots[self.local.rank] = tensor.clone()
        self.barrier.wait()
        slots = list(self.slots)
        self.barrier.wait()
        shapes = [list(s.shape) for s in slots]
        if any(shape != shapes[0] for shape in shapes):
            on = ", ".join(f"{shape} on rank {r}" for r, shape in enumerate(shapes))
            raise Refused(f"all_gather: tensor shapes differ across ranks: {on}")
        return torch.cat(slots, dim=dim)

    def run(self, call) -> list:
        """``call(rank)`` on every rank at once; what each returned (or raised)."""
        results = [None] * self.world_size

        def one(rank: int) -> None:
            self.local.rank, CURRENT.group = rank, self
            try:
                results[rank] = call(rank)
            except Exception as exc:  # noqa: BLE001 - shown as the rank's outcome
                results[rank] = exc
                if not isinstance(exc, Refused):
                    self.barrier.abort()  # the other ranks' collectives fail at once rather than waiting

        threads = [threading.Thread(target=one, args=(r,)) for r in range(self.world_size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        return results


def processor():
    """The processor whose ``_get_logits_normal`` runs: vLLM's ``_apply_head`` (``quant_method.apply``) beside it,
    which checkouts after 0.23.0.post1 call."""
    made = EMBED["AscendLogitsProcessor"]()
    made._apply_head = lambda head, x, bias: head.quant_method.apply(head, x, bias=bias)
    return made


def rank_logits(rows, vocab: int, tp: int, rank: int):
    """Rank ``rank``'s logits as the shipped ``_get_logits_normal`` cuts them: vLLM pads the vocabulary to a
    multiple of 64, splits the padded rows evenly, and the rank's base ids are ``[start, min(start + per, vocab))``;
    the head's weights are the full rows' logits (hidden states the identity), padding rows 0."""
    per = -(-vocab // 64) * 64 // tp
    start, end = min(rank * per, vocab), min((rank + 1) * per, vocab)
    full = torch.tensor(rows, dtype=torch.float32)  # [B, vocab]
    weight = torch.zeros(per, full.shape[0])
    weight[: end - start] = full[:, start:end].T
    head = types.SimpleNamespace(
        weight=weight,
        num_org_embeddings_per_partition=end - start,
        quant_method=types.SimpleNamespace(apply=lambda layer, x, bias=None: x @ layer.weight.T),
    )
    return processor()._get_logits_normal(torch.eye(full.shape[0]), head, None)


def spread(vocab: int, top: int | None = None) -> list[float]:
    """Distinct logits over ``vocab`` ids (a permutation of 0..vocab-1, over 16); ``top`` set: that id the max."""
    row = [((i * 37) % vocab) / 16 for i in range(vocab)]
    if top is not None:
        row[top] = vocab / 16
    return row


def shown(results: list) -> list:
    def one(r):
        if isinstance(r, threading.BrokenBarrierError):
            return "BrokenBarrierError (its all_gather's peer raised)"
        kind = "RuntimeError" if isinstance(r, Refused) else type(r).__name__  # the error a collective raises
        return f"{kind}: {r}" if isinstance(r, Exception) else r

    return [one(r) for r in results]


def argmax(row: list[float]) -> int:
    return int(torch.argmax(torch.tensor(row)))


def greedy(fn, rows, vocab: int, tp: int = 2) -> list:
    group = Group(tp)
    return shown(group.run(lambda r: fn(rank_logits(rows, vocab, tp, r))[0].item()))


def greedy_copies() -> bool:
    copies = {
        "sample/sampler.py AscendSampler.greedy_sample": from_source(SAMPLER, NAMES[SAMPLER], **CONFIG)[
            "AscendSampler"
        ].greedy_sample,
        "sample/rejection_sampler.py greedy_sample": from_source(REJECTION, {"greedy_sample"})["greedy_sample"],
        "spec_decode/llm_base_proposer.py greedy_sample": from_source(PROPOSER, {"greedy_sample"})["greedy_sample"],
    }
    failed = False
    for name, fn in copies.items():
        row = spread(100, top=99)
        got = greedy(fn, [row], 100)
        print(f"{name}, vocabulary 100 at tp 2 (widths 64, 36): {got} on ranks 0, 1 (torch.argmax: {argmax(row)})")
        failed |= got != [argmax(row)] * 2
    for name, fn in copies.items():
        row = spread(7, top=2)
        got = greedy(fn, [row], 7)
        print(f"{name}, vocabulary 7 at tp 2 (widths 7, 0): {got} on ranks 0, 1 (torch.argmax: {argmax(row)})")
        failed |= got != [argmax(row)] * 2
    return failed


def top_k_top_p(rows, vocab: int, k, p, top_k) -> list:
    """The reduce branch on every rank of ``rows`` at tp 2: the ids each row keeps (finite candidates)."""
    fn = from_source(SAMPLER, {"_apply_top_k_top_p_pytorch"}, **CONFIG)["_apply_top_k_top_p_pytorch"]

    def rank(r: int):
        vals, ids = fn(rank_logits(rows, vocab, 2, r), k, p, top_k)
        finite = [[i for v, i in zip(vr, ir, strict=True) if v != NEG_INF] for vr, ir in zip(vals, ids, strict=True)]
        return [sorted(int(i) for i in row) for row in finite]

    return shown(Group(2).run(rank))


def classic(rows, k, p) -> list[list[int]]:
    """The ids each row keeps on the whole vocabulary: the same function without the switch (vLLM's classic)."""
    fn = from_source(SAMPLER, {"_apply_top_k_top_p_pytorch"}, get_ascend_config=lambda: CLASSIC)
    out = fn["_apply_top_k_top_p_pytorch"](torch.tensor(rows), k, p, None)
    return [[i for i, v in enumerate(row) if v != NEG_INF] for row in out.tolist()]


def kept(got: list) -> str:
    return str(got[0]) if isinstance(got[0], str) else f"{[len(row) for row in got[0]]} tokens kept a row"


def kept_against_classic(label: str, rows, vocab: int, k, p, top_k) -> bool:
    """The reduce branch's kept ids at tp 2 against the classic branch's on the whole vocabulary; True where they
    differ."""
    got, want = top_k_top_p(rows, vocab, k, p, top_k), classic(rows, k, p)
    print(
        f"_apply_top_k_top_p_pytorch, vocabulary {vocab} at tp 2{label}: {kept(got)}"
        f" (classic: {[len(row) for row in want]} tokens kept a row)"
    )
    return got != [want, want]


def sampling_paths() -> bool:
    failed = False
    # 3: a greedy row (top-p 1.0, max at id 200 on rank 1) beside a sampled row (top-p 0.9); ranks 128 wide
    rows, p = [spread(256, top=200), spread(256)], torch.tensor([1.0, 0.9])
    fn = from_source(SAMPLER, {"_apply_top_k_top_p_pytorch"}, **CONFIG)["_apply_top_k_top_p_pytorch"]
    pick = from_source(REJECTION, {"greedy_sample"})["greedy_sample"]
    got = shown(Group(2).run(lambda r: pick(fn(rank_logits(rows, 256, 2, r), None, p, None)[0])[0].item()))
    print(
        "rejection sampler, greedy row beside a sampled row, vocabulary 256 at tp 2: greedy_sample on"
        f" _apply_top_k_top_p_pytorch's candidate values gives {got} on ranks 0, 1 (torch.argmax: {argmax(rows[0])})"
    )
    failed |= got != [argmax(rows[0])] * 2
    # 4: rows k = [2, 256 (no top-k: the vocabulary size)], top_k = 2 (the largest k below the width, 128)
    failed |= kept_against_classic(
        ", rows k = [2, 256], top_k 2", [spread(256)] * 2, 256, torch.tensor([2, 256]), None, 2
    )
    # 5: widths 64 and 36, no top-k anywhere (top_k None), one row top-p 0.9
    label = " (widths 64, 36), top-p 0.9, top_k None"
    failed |= kept_against_classic(label, [spread(100)], 100, None, torch.tensor([0.9]), None)
    # 6: row 0 k = 200 (at or above the width 128), row 1 k = 127 so top_k = 127: 254 candidates a row (a second
    # row k = 2 would make top_k 2, 4 candidates, and row 0 would raise as in 4: 4 - 128 is negative)
    label = ", rows k = [200, 127], top_k 127"
    failed |= kept_against_classic(label, [spread(256)] * 2, 256, torch.tensor([200, 127]), None, 127)
    return failed


def added_ids() -> bool:
    """7: 128 base ids and 8 added at tp 2.  vLLM's rows per rank: 64 base, then the added block (4 added ids, 28
    padding rows); the row's maximum is added id 130 (rank 0's added row 2)."""
    base, added, winner = 128, 8, 130
    fn = from_source(SAMPLER, NAMES[SAMPLER], **CONFIG)["AscendSampler"].greedy_sample

    def rank(r: int):
        weight = torch.zeros(96, 1)
        ids = [r * 64 + i for i in range(64)] + [base + r * 4 + i for i in range(4)]
        for row, token in enumerate(ids):
            weight[row, 0] = 2.0 if token == winner else (token % 7) / 8
        head = types.SimpleNamespace(
            weight=weight,
            num_org_embeddings_per_partition=64,
            quant_method=types.SimpleNamespace(apply=lambda layer, x, bias=None: x @ layer.weight.T),
        )
        logits = processor()._get_logits_normal(torch.ones(1, 1), head, None)
        return fn(logits)[0].item()

    got = shown(Group(2).run(rank))
    print(
        f"the cut, then AscendSampler.greedy_sample, {base} base ids and {added} added at tp 2: {got} on ranks 0, 1"
        f" (torch.argmax over every token: {winner})"
    )
    return got != [winner] * 2


def contract_kept(row: list[float], k: int, p: float) -> list[int]:
    """The contract's kept ids: the top k (ties kept), then the nucleus of what top-k kept, in float64."""
    x = torch.tensor(row, dtype=torch.float64)
    kth = x.sort(descending=True).values[k - 1]
    kept = x >= kth
    mass = torch.where(kept, (x - x[kept].max()).exp(), torch.zeros_like(x))
    order = mass.argsort(descending=True)
    above = mass[order].cumsum(0) - mass[order]
    inside = torch.zeros_like(kept)
    inside[order] = above < p * mass.sum()
    return sorted(int(i) for i in torch.nonzero(kept & inside).flatten())


def top_p_before_top_k() -> bool:
    """8: 256 ids at tp 2, one row with top-k 4 and top-p 0.5 (top_k 4: 8 gathered candidates)."""
    row = spread(256)
    got = top_k_top_p([row], 256, torch.tensor([4]), torch.tensor([0.5]), 4)
    want = contract_kept(row, 4, 0.5)
    first = got[0] if isinstance(got[0], str) else got[0][0]
    print(
        f"_apply_top_k_top_p_pytorch, vocabulary 256 at tp 2, top-k 4 and top-p 0.5: {first} kept"
        f" (vLLM's order, top-p over what top-k kept: {want})"
    )
    return got != [[want], [want]]


def logits_vocabulary() -> bool:
    """9: 128 base ids at tp 2 behind a logits processor of 100 ids; the row's maximum is id 110."""
    row, logits_vocab = spread(128, top=110), 100
    fn = from_source(SAMPLER, NAMES[SAMPLER], **CONFIG)["AscendSampler"].greedy_sample
    got = greedy(fn, [row], 128)
    want = argmax(row[:logits_vocab])
    print(
        f"the cut, then AscendSampler.greedy_sample, 128 base ids, logits vocabulary {logits_vocab}, tp 2: {got} on"
        f" ranks 0, 1 (torch.argmax over ids below {logits_vocab}: {want})"
    )
    return got != [want] * 2


def main() -> int:
    global torch
    if (why := cannot_judge()) is not None:
        print(UNJUDGED + why)
        return 2
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
    except ImportError as exc:
        print(UNJUDGED + f"torch cannot be imported ({exc})")
        return 2
    EMBED.update(from_source(EMBEDDING, NAMES[EMBEDDING], **CONFIG))
    failed = greedy_copies()
    failed |= sampling_paths()
    failed |= added_ids()
    failed |= top_p_before_top_k()
    failed |= logits_vocabulary()
    print("DEFECTS SHOWN" if failed else "all nine agree with torch.argmax and the classic top-k/top-p")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
