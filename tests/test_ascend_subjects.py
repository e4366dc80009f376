"""vllm-ascend's reduce picks on pinned heads, each beside its corrected twin: what the page's causes say, shown on
the smallest heads (a narrower last rank, a rank without base ids, added ids, a sampled request beside greedy ones).

They run vllm-ascend's files, so they skip without ``tpargmax install-ascend``, with that command as the reason.
"""

from __future__ import annotations

import pytest
import torch

from engines.ascend.corrections import reduce as corrected
from engines.ascend.subjects import greedy
from engines.ascend.wheel.source import why_unavailable
from groups.simulated import run_simulated
from sharded.layout import vocab_parallel_layout

pytestmark = pytest.mark.skipif(why_unavailable() is not None, reason=why_unavailable() or "")


def _run(fn, vocab: int, tp: int, winner: int, added: int = 0, **kwargs) -> list[list[int]]:
    """Every rank's tokens for two rows whose maximum is ``winner`` (row 0) and id 0 (row 1)."""
    layouts = vocab_parallel_layout(vocab, tp, added_vocab=added)
    hidden = torch.eye(2, 3)
    full = torch.zeros(layouts[0].padded_vocab, 3)
    for layout in layouts:
        rows, ids = layout.token_rows(), layout.token_ids()
        base = layout.rank * layout.size
        full[base + rows[ids == winner], 0] = 1.0
        full[base + rows[ids == 0], 1] = 1.0

    def rank(group):
        layout = layouts[group.rank]
        shard = full[layout.rank * layout.size : (layout.rank + 1) * layout.size]
        return fn(hidden, shard, None, layout, group=group, **kwargs).tolist()

    return run_simulated(rank, tp)[0]


PICKS = [
    (greedy.ascend_sampler_greedy, corrected.ascend_sampler_greedy_corrected),
    (greedy.ascend_rejection_greedy, corrected.ascend_rejection_greedy_corrected),
    (greedy.ascend_draft_greedy, corrected.ascend_draft_greedy_corrected),
]


@pytest.mark.parametrize(("shipped", "fixed"), PICKS, ids=lambda fn: fn.__name__)
def test_an_id_on_the_narrower_last_rank_comes_back_shifted_and_the_correction_maps_it(shipped, fixed):
    # 100 ids at tp 2: shards of 64, rank 1 holds ids 64..99 in its 36 base columns; 99 is its column 35
    assert _run(shipped, 100, 2, 99) == [[35 + 36, 0]] * 2
    assert _run(fixed, 100, 2, 99) == [[99, 0]] * 2


@pytest.mark.parametrize(("shipped", "fixed"), PICKS, ids=lambda fn: fn.__name__)
def test_a_rank_without_base_ids_raises_and_the_correction_offers_nothing_from_it(shipped, fixed):
    with pytest.raises(Exception, match="max\\(\\): Expected reduction dim 1 to have non-zero size"):
        _run(shipped, 7, 2, 6)
    assert _run(fixed, 7, 2, 6) == [[6, 0]] * 2


def test_an_added_id_never_competes_and_the_correction_offers_it():
    # 128 base ids and 8 added ids at tp 2: the added id 130 is rank 0's; the cut keeps base columns alone
    assert _run(greedy.ascend_sampler_greedy, 128, 2, 130, added=8) == [[0, 0]] * 2  # every base logit 0: id 0
    assert _run(corrected.ascend_sampler_greedy_corrected, 128, 2, 130, added=8) == [[130, 0]] * 2


def test_beside_a_sampled_request_the_greedy_rows_get_a_candidate_column():
    # 256 ids at tp 2, every rank 128 wide: the gathered candidates are sorted per rank, so the winner's column is
    # its rank's first (rank 1: 128), whatever its id
    shipped = _run(greedy.ascend_rejection_greedy_beside_sampled, 256, 2, 200)
    assert shipped == [[128, 0]] * 2
    assert _run(corrected.ascend_rejection_greedy_beside_sampled_corrected, 256, 2, 200) == [[200, 0]] * 2
