"""The corrections of vLLM's ``LogitsProcessor`` (``engines.vllm.corrections.processor``): their pieces against vLLM's
own layout
and the reference order, the defects they replace shown on vLLM's class, and the corrected methods on one rank.

The gloo runs of the corrected subjects through the properties are the suite's (``--impl
engines.vllm.subjects.corrected:*``); these checks need no process group: a head of ``tp_size`` 1 whose rows hold every
layout case (base rows, base padding, added rows, added padding, ids at or past the logits vocabulary).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from engines.vllm.subjects.layer import INSTALL_HINT

pytest.importorskip("vllm", reason=INSTALL_HINT)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engines.findings import applied  # noqa: E402
from engines.versions import unlisted_vllm  # noqa: E402
from engines.vllm.corrections import processor as fixes  # noqa: E402
from reference.topk import top_k_ids  # noqa: E402

# (base ids, added ids, padding size, tp): added ids after the base padding, and one rank with no tokens at all
LAYOUTS = [(10, 0, 4, 2), (10, 3, 4, 2), (1, 1, 64, 2), (1, 17, 64, 4), (1000, 40, 128, 4), (1010, 16, 64, 2)]


def _head(org: int, added: int, padding: int, tp: int, rank: int = 0) -> SimpleNamespace:
    """What the corrections read from a ``ParallelLMHead``: vLLM's own sizes and shard indices for ``rank``."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding, pad_vocab_size

    org_padded = pad_vocab_size(org, padding)
    total_padded = pad_vocab_size(org_padded + added, padding)
    return SimpleNamespace(
        tp_size=tp,
        tp_rank=rank,
        org_vocab_size=org,
        num_embeddings=org + added,
        num_added_embeddings=added,
        org_vocab_size_padded=org_padded,
        num_embeddings_padded=total_padded,
        num_embeddings_per_partition=total_padded // tp,
        shard_indices=VocabParallelEmbedding._get_indices(total_padded, org_padded, org + added, org, rank, tp),
        _get_indices=VocabParallelEmbedding._get_indices,
        quant_method=SimpleNamespace(apply=lambda layer, x, bias=None: F.linear(x, layer.weight, bias)),
    )


def _full_mapping(head: SimpleNamespace) -> list[int]:
    """vLLM's ``get_sharded_to_full_mapping`` (the gathered column of each id, then padding), run on ``head``."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    return VocabParallelEmbedding.get_sharded_to_full_mapping(head)


@pytest.mark.parametrize(("org", "added", "padding", "tp"), LAYOUTS)
def test_token_columns_are_vllms_rows_of_each_id(org: int, added: int, padding: int, tp: int) -> None:
    """V1, V3: each rank's token columns are the rows vLLM's own mapping gives each id below the logits vocabulary."""
    whole = _head(org, added, padding, tp)
    mapping = _full_mapping(whole)
    per_rank = whole.num_embeddings_per_partition
    for logits_vocab in (org + added, max(1, org + added - 3), 1):
        for rank in range(tp):
            columns, ids = fixes._token_columns(logits_vocab, _head(org, added, padding, tp, rank), torch.device("cpu"))
            want = [(mapping[i] - rank * per_rank, i) for i in range(logits_vocab) if mapping[i] // per_rank == rank]
            assert list(zip(columns.tolist(), ids.tolist(), strict=True)) == want


@pytest.mark.parametrize(("org", "added", "padding", "tp"), [x for x in LAYOUTS if x[3] > 1])
def test_id_columns_are_get_sharded_to_full_mapping(org: int, added: int, padding: int, tp: int) -> None:
    """V2: the classic path's column of each id, from the sizes, is vLLM's own ``get_sharded_to_full_mapping``."""
    head = _head(org, added, padding, tp)
    got = fixes._id_columns(head, org + added, torch.device("cpu")).tolist()
    assert got == _full_mapping(head)[: org + added]


def test_best_is_the_classic_order() -> None:
    """V5: NaN first (either sign), larger values, equal values (``-0.0 == +0.0``) by the smaller id."""
    nan, inf = math.nan, math.inf
    rows = torch.tensor(
        [
            [1.0, 3.0, 3.0, -inf, 3.0, 0.0, -0.0, 2.0],
            [-0.0, 0.0, -inf, -inf, -inf, -inf, -inf, -inf],
            [nan, 1.0, -nan, inf, inf, 0.0, nan, -1.0],
            [-inf] * 8,
        ]
    )
    for k in range(1, 9):
        values, ids = fixes._best(rows, torch.arange(8), k)
        assert torch.equal(ids, top_k_ids(rows, k)), k
        assert torch.equal(values.view(torch.int32), rows.gather(1, ids).view(torch.int32))
    # ids that are not the columns' order (an added block, a merge across ranks): the order follows the ids
    perm = torch.tensor([5, 0, 7, 2, 1, 6, 3, 4])
    by_id = torch.empty_like(rows)
    by_id[:, perm] = rows
    for k in range(1, 9):
        assert torch.equal(fixes._best(rows, perm, k)[1], top_k_ids(by_id, k)), k


def test_best_fills_missing_slots_below_every_token() -> None:
    """V6: a shard with fewer than k tokens fills its slots with candidates that lose even to a -inf token."""
    values, ids = fixes._best(torch.full((1, 2), -math.inf), torch.tensor([7, 3]), 4)
    assert ids.tolist() == [[3, 7, fixes._NO_ID, fixes._NO_ID]]
    merged = fixes._best(values, ids, 2)[1]
    assert merged.tolist() == [[3, 7]]


def test_log_partition_is_log_softmaxs() -> None:
    """Log-probabilities ``(value - shift) - log_sum`` are ``log_softmax``'s (the classic path's) at logits near 500,
    where a ``logsumexp`` subtracted from the value rounds to 6e-5; special rows give ``torch.logsumexp``'s answers."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 300, generator=gen) * 3 + 500
    shift, log_sum = fixes._log_partition(x, 1)
    truth = x.double().log_softmax(dim=-1)
    assert float(((x - shift) - log_sum - truth).abs().max()) < 2e-6
    inf, nan = math.inf, math.nan
    rows = torch.tensor([[-inf, -inf, -inf], [inf, 1.0, 2.0], [nan, 1.0, 2.0], [-inf, 3.0, -inf]])
    shift, log_sum = fixes._log_partition(rows, 1)
    want = rows - torch.logsumexp(rows, dim=-1, keepdim=True)
    assert torch.allclose((rows - shift) - log_sum, want, equal_nan=True)
    empty = fixes._log_partition(torch.empty(2, 0), 1)
    assert torch.equal(empty[0] + empty[1], torch.full((2, 1), -inf))


# One rank (tp_size 1) holding all of: base ids 0..4, base padding, added ids 5..7, added padding; logits vocabulary 7
ORG, ADDED, PADDING, LOGITS_VOCAB, HIDDEN = 5, 3, 8, 7, 3


def _processor(scale: float = 1.0, soft_cap: float | None = None) -> torch.nn.Module:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    with set_current_vllm_config(VllmConfig()):
        return LogitsProcessor(ORG + ADDED, org_vocab_size=LOGITS_VOCAB, scale=scale, soft_cap=soft_cap)


def _rank_head(by_id: torch.Tensor, pad_value: float) -> SimpleNamespace:
    """The one-rank head whose token rows are ``by_id``'s rows (row i is id i) and whose padding rows score high."""
    head = _head(ORG, ADDED, PADDING, 1)
    weight = torch.full((head.num_embeddings_per_partition, HIDDEN), pad_value)
    weight[:ORG] = by_id[:ORG]
    added_row = head.shard_indices.num_org_elements_padded
    weight[added_row : added_row + ADDED] = by_id[ORG:]
    head.weight = weight
    return head


def _case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    by_id = torch.randint(-3, 4, (ORG + ADDED, HIDDEN), generator=gen).float()
    hidden = torch.randint(-2, 3, (4, HIDDEN), generator=gen).float()
    return by_id, hidden


def _classic(by_id: torch.Tensor, hidden: torch.Tensor, scale: float, soft_cap: float | None) -> torch.Tensor:
    logits = F.linear(hidden, by_id[:LOGITS_VOCAB])
    if soft_cap is not None:
        logits = torch.tanh(logits / soft_cap) * soft_cap
    return logits * scale if scale != 1.0 else logits


@pytest.mark.parametrize(("scale", "soft_cap"), [(1.0, None), (0.5, 2.0)])
def test_corrected_methods_match_the_classic_path_on_one_rank(scale: float, soft_cap: float | None) -> None:
    """V1, V3, V5, V6, V7, V8: argmax, top-k ids in order, values bit for bit, log-probs; V2: the classic logits."""
    processor = _processor(scale, soft_cap)
    for seed in range(20):
        by_id, hidden = _case(seed)
        head = _rank_head(by_id, pad_value=9.0)  # padding rows would win every row if they took part
        want = _classic(by_id, hidden, scale, soft_cap)
        assert torch.equal(fixes.get_top_tokens(processor, head, hidden), want.argmax(dim=-1))
        for k in range(1, LOGITS_VOCAB + 1):
            ids, values = fixes.get_top_k_tokens(processor, head, hidden, k)
            assert torch.equal(ids, top_k_ids(want, k)), (seed, k)
            assert torch.equal(values.view(torch.int32), want.gather(1, ids).view(torch.int32))
            ids, log_probs = fixes.get_top_k_tokens(processor, head, hidden, k, return_log_probs=True)
            assert torch.allclose(log_probs, want.log_softmax(dim=-1).gather(1, ids), atol=1e-6)
        assert torch.equal(fixes._get_logits(processor, hidden, head, None), F.linear(hidden, by_id[:LOGITS_VOCAB]))


def test_corrected_top_k_rejects_k_outside_the_logits_vocabulary() -> None:
    """V9: k above the logits vocabulary (or below 1) is a ValueError that names k."""
    by_id, hidden = _case(0)
    head, processor = _rank_head(by_id, 0.0), _processor()
    for k in (0, LOGITS_VOCAB + 1):
        with pytest.raises(ValueError, match=f"k={k}"):
            fixes.get_top_k_tokens(processor, head, hidden, k)


def test_the_originals_show_the_defects_the_patches_replace() -> None:
    """vLLM's own methods on the same head: an added row named by its position (V1), padding and ids past the logits
    vocabulary returned (V1, V3), k above it accepted (V9), on a listed release; with the patches in place, on any
    build, the classic answers."""
    processor = _processor()
    by_id = torch.zeros(ORG + ADDED, HIDDEN)
    by_id[ORG + 1, 0] = 5.0  # added id 6 wins for ``hidden``: it sits at row 9 of the shard
    hidden = torch.tensor([[1.0, 0.0, 0.0]])
    head = _rank_head(by_id, pad_value=-1.0)  # padding rows score -1 for ``hidden``, +1 for ``-hidden``
    if unlisted_vllm() is None:  # a listed release's defects; another build's are --baseline's to judge
        assert int(processor.get_top_tokens(head, hidden)[0]) == 9  # V1: its row, not its id
        ids, _ = processor.get_top_k_tokens(head, hidden, LOGITS_VOCAB + 1)  # V9: accepted
        assert ids.shape == (1, LOGITS_VOCAB + 1)
        ids, _ = processor.get_top_k_tokens(head, -hidden, LOGITS_VOCAB)  # live base padding: 5 to 7, 11, 12
        assert int(ids.max()) >= LOGITS_VOCAB
    with applied(fixes.PATCHES):
        assert int(processor.get_top_tokens(head, hidden)[0]) == ORG + 1
        ids, _ = processor.get_top_k_tokens(head, -hidden, LOGITS_VOCAB)
        assert ids[0].tolist() == [*range(LOGITS_VOCAB)]  # zeros by id, then id 6 at -5
        with pytest.raises(ValueError, match=f"k={LOGITS_VOCAB + 1}"):
            processor.get_top_k_tokens(head, hidden, LOGITS_VOCAB + 1)
    assert processor.get_top_tokens.__func__ is not fixes.get_top_tokens  # the originals are back


def test_patches_name_methods_that_exist_and_are_the_class_used() -> None:
    """Each target exists in this vLLM, and ``LogitsProcessor`` instantiates as itself (no out-of-tree swap)."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    for patch in fixes.PATCHES:
        owner, attr = patch.owner()
        assert owner is LogitsProcessor and callable(getattr(owner, attr))
    assert type(_processor()) is LogitsProcessor
