"""The fused Triton kernel emits ``encode_keys(*local_best(head_logits(...)))`` bit for bit, and ``triton_key``
answers like ``packed_key``.

Runs on CUDA, or on the CPU under ``TRITON_INTERPRET=1`` (keep shards small: the interpreter is slow); skipped
where Triton is missing (the default install).  The interpreter has no libdevice, so there the kernel's ``tanh``
is fp64-computed: it equals torch's CPU ``tanh`` on every bf16 and fp16 input (checked exhaustively below) but
not on every fp32 one, so fp32 soft-cap results are compared with a correctly rounded ``tanh`` there, and with
torch's own only on CUDA.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F

from groups.simulated import run_simulated
from reference.logits import head_logits
from sharded.keys import decode_ids, encode_keys
from sharded.layout import vocab_parallel_layout
from sharded.local_argmax import local_best, packed_key
from sharded.triton_key import MASKED, shard_keys, triton_key, why_unavailable

if why_unavailable():
    pytest.skip(why_unavailable(), allow_module_level=True)
import triton  # noqa: E402 - only where it is installed
import triton.language as tl  # noqa: E402

from sharded.triton_key import _load, _logits, _ordered, _pack, logit_args  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.* encountered in:RuntimeWarning")  # the interpreter's NumPy

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SCALE_CAPS = ((1.0, None), (0.7, None), (1.0, 30.0), (1.3, 0.5))
LAYOUTS = (
    *vocab_parallel_layout(1010, 2, added_vocab=16),  # rank 0: base and added tokens; rank 1: added padding only
    *vocab_parallel_layout(1010, 2, added_vocab=16, logits_vocab=1015),  # added ids >= L are not tokens
    *vocab_parallel_layout(10, 4, added_vocab=100)[1:],  # added tokens only, then 4 of 32 added rows
    vocab_parallel_layout(100, 4, logits_vocab=30)[1],  # no token at all
)
PLANS = ((None, None), (16, 3), (32, 1), (16, 1000))  # (block, splits): default, split, one part, one tile a part


def _capped(raw: torch.Tensor, scale: float, soft_cap: float | None) -> torch.Tensor:
    """``head_logits`` after its matmul (checked against it below); fp32 ``tanh`` correctly rounded when the
    kernel's is (the interpreter)."""
    logits = raw
    if soft_cap is not None:
        logits = logits / soft_cap
        if INTERPRETED and raw.dtype == torch.float32:
            logits = torch.tanh(logits.double()).float()
        else:
            logits = torch.tanh(logits)
        logits = logits * soft_cap
    return logits * scale if scale != 1.0 else logits


def _adversarial(layout, dtype: torch.dtype) -> torch.Tensor:
    """Rows of ties, NaNs of both signs, +-0, all -inf, and non-token rows holding what would otherwise win."""
    g = torch.Generator().manual_seed(layout.rank + 7 * layout.vocab)
    tokens = layout.token_rows().tolist() or [0]
    others = sorted(set(range(layout.size)) - set(layout.token_rows().tolist()))
    first, mid, last = tokens[0], tokens[len(tokens) // 2], tokens[-1]
    big = torch.finfo(dtype).max
    rows = torch.randn(14, layout.size, generator=g) * 50
    rows[1, [mid, last, first]] = 1e3  # a three-way tie: the first token wins
    rows[2, :] = torch.randint(-3, 3, (layout.size,), generator=g).float()  # many ties
    rows[3, [mid, last]] = torch.tensor([-math.nan, math.nan])  # the first NaN wins, whatever its sign
    rows[3, first] = math.inf
    rows[4] = -rows[4].abs() - 1
    rows[4, [mid, last]] = torch.tensor([-0.0, 0.0])  # -0 ties +0
    rows[5] = -rows[5].abs() - 1
    rows[5, [mid, last]] = torch.tensor([0.0, -0.0])
    rows[6, :] = -math.inf  # the first token
    rows[7, last] = 2e3  # the last token (an added one where there are)
    rows[8, [mid, last]] = torch.tensor([1e3, 2e3])  # a tie once capped, not without
    rows[9, :] = math.nan  # every token NaN: the first
    rows[10, first] = -math.nan
    rows[11, [first, last]] = torch.tensor([1e-30, 1e-30])  # 0 in bf16/fp16 only
    rows[12, [first, last]] = torch.tensor([big, math.inf])
    for r, fill in zip(range(14), (math.inf, math.nan, -math.nan, big, 1e4), strict=False):
        rows[r, others] = fill  # non-token rows hold a winner
    return rows.to(dtype).to(DEVICE)


def _expected(raw: torch.Tensor, layout, scale: float, soft_cap: float | None) -> torch.Tensor:
    return encode_keys(*local_best(_capped(raw, scale, soft_cap), layout))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """fp32 bits with every NaN one pattern: NaN payloads differ between devices and never matter here."""
    return torch.where(t.isnan(), torch.full_like(t, math.nan), t).float().view(torch.int32)


def test_capped_is_head_logits_after_its_matmul():
    g = torch.Generator().manual_seed(0)
    hidden, weight, bias = (torch.randn(*s, generator=g).to(DEVICE) for s in ((3, 8), (40, 8), (40,)))
    for dtype in DTYPES:
        h, w, b = (t.to(dtype) for t in (hidden, weight, bias))
        for scale, cap in SCALE_CAPS:
            if not (INTERPRETED and dtype == torch.float32 and cap):
                got = _capped(F.linear(h, w, b), scale, cap)
                assert torch.equal(_bits(got), _bits(head_logits(h, w, b, scale, cap)))


@pytest.mark.parametrize("scale, soft_cap", SCALE_CAPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_keys_equal_encode_keys_of_local_best(dtype, scale, soft_cap):
    for i, layout in enumerate(LAYOUTS):
        raw = _adversarial(layout, dtype)
        want = _expected(raw, layout, scale, soft_cap)
        for block, splits in (PLANS[0], PLANS[1 + i % 3]):
            got = shard_keys(raw, layout, scale=scale, soft_cap=soft_cap, block=block, splits=splits)
            assert got.dtype == torch.int64 and got.shape == want.shape
            bad = (got != want).nonzero().flatten().tolist()
            assert not bad, f"rank {layout.rank} of {layout}, plan {(block, splits)}: rows {bad} differ"


def test_a_rank_without_tokens_offers_minus_inf_at_its_first_id():
    layout = LAYOUTS[-1]
    raw = torch.full((3, layout.size), math.nan, device=DEVICE)
    keys = shard_keys(raw, layout, scale=1.0, soft_cap=None)
    assert keys.tolist() == encode_keys(torch.full((3,), -math.inf), torch.full((3,), layout.start)).tolist()
    assert shard_keys(raw[:0], LAYOUTS[0], scale=1.0, soft_cap=None).shape == (0,)


# an elementwise view of the kernel's math: one key per logit, one program per 4096


@triton.jit
def _elementwise_keys(
    src, dst, n, cap, inv_cap, scale, KIND: tl.constexpr, HAS_CAP: tl.constexpr, RECIPROCAL: tl.constexpr,
    LIBDEVICE: tl.constexpr, HAS_SCALE: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0) * 4096 + tl.arange(0, 4096)
    x = _load(src + i, i < n, KIND)
    v = _logits(x, cap, inv_cap, scale, KIND, HAS_CAP, RECIPROCAL, LIBDEVICE, HAS_SCALE)
    tl.store(dst + i, _pack(_ordered(v), i), mask=i < n)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_value_is_rounded_like_torch(dtype):
    """The kernel's logit and key of every bf16/fp16 input (exhaustive) and of a spread of fp32 ones."""
    g = torch.Generator().manual_seed(1)
    if dtype == torch.float32:
        exps = torch.randint(-40, 40, (1 << 16,), generator=g).float()
        values = torch.randn(1 << 16, generator=g) * torch.exp2(exps)
        values[:6] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan])
    else:
        values = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    raw, ids = values.to(DEVICE), torch.arange(values.numel(), device=DEVICE)
    wrong = []  # every (scale, cap) that differs, each with its first inputs and how far (in keys' ulps)
    for scale, soft_cap in (*SCALE_CAPS, (1.0, 1e-3), (3.0, 7.0), (1e-30, None)):
        got = torch.empty(values.numel(), dtype=torch.int64, device=DEVICE)
        scalars, flags = logit_args(raw, scale, soft_cap)
        src = raw.view(torch.int16) if dtype == torch.bfloat16 else raw
        _elementwise_keys[(triton.cdiv(values.numel(), 4096),)](src, got, values.numel(), *scalars, **flags)
        want = encode_keys(_capped(raw, scale, soft_cap), ids)
        bad = (got != want).nonzero().flatten()
        if bad.numel():
            ulps = ((got[bad] >> 32) - (want[bad] >> 32))[:3].tolist()
            first = values[bad.cpu()][:3].tolist()
            wrong.append(f"scale {scale}, cap {soft_cap}: {bad.numel()} inputs, {first} by {ulps}")
    assert not wrong, "; ".join(wrong)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_triton_key_answers_like_packed_key_on_every_rank(dtype):
    layouts = vocab_parallel_layout(1010, 2, added_vocab=16)
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(5, 16, generator=g)
    weights = [torch.randn(lay.size, 16, generator=g) for lay in layouts]
    weights[1][600 - 512] = weights[0][512] = 4 * hidden[0]  # ids 600 and 1010 tie on row 0: 600 wins
    biases = [torch.randn(lay.size, generator=g) for lay in layouts]
    biases[0][3] = math.nan  # row-wide NaN: id 3 wins every row
    d2t = torch.randperm(1026, generator=g) - torch.arange(1026)  # a permutation of the ids
    d2t = d2t if DEVICE == "cpu" else None  # reference.checks.check_d2t builds its arange on the CPU
    cases = [dict(scale=1.0, soft_cap=None, d2t=None, bias=True), dict(scale=0.5, soft_cap=20.0, d2t=d2t, bias=False)]
    for case in cases:
        args = [
            (hidden.to(dtype).to(DEVICE), w.to(dtype).to(DEVICE), b.to(dtype).to(DEVICE) if case["bias"] else None)
            for w, b in zip(weights, biases, strict=True)
        ]
        kwargs = {k: case[k] for k in ("scale", "soft_cap", "d2t")}

        def run(impl, args=args, kwargs=kwargs):
            return run_simulated(lambda group: impl(*args[group.rank], layouts[group.rank], group=group, **kwargs), 2)

        got, want = run(triton_key)[0], run(packed_key)[0]
        assert [t.tolist() for t in got] == [t.tolist() for t in want]
        if case["bias"]:
            assert got[0].tolist() == [3] * 5
        else:
            assert int(got[0][0]) == 600 + (0 if d2t is None else int(d2t[600]))


def test_bad_input_is_refused_like_the_builtins():
    layout = vocab_parallel_layout(100, 1)[0]
    hidden, weight = torch.zeros(2, 4, device=DEVICE), torch.zeros(layout.size, 4, device=DEVICE)
    for kwargs, word in ((dict(scale=0.0), "scale"), (dict(soft_cap=-1.0), "soft_cap")):
        with pytest.raises(ValueError, match=word):
            triton_key(hidden, weight, None, layout, group=None, **kwargs)
    with pytest.raises(ValueError, match="rows"):
        triton_key(hidden, weight[1:], None, layout, group=None)
    with pytest.raises(ValueError, match="dtype"):
        triton_key(hidden.half(), weight, None, layout, group=None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the cached workspace exists on CUDA only")
def test_the_split_path_leaves_its_workspace_as_it_found_it():
    from sharded.triton_key import _workspaces

    layout = vocab_parallel_layout(4096, 1)[0]
    raw = torch.randn(3, layout.size, device="cuda")
    for _ in range(3):
        keys = shard_keys(raw, layout, scale=1.0, soft_cap=None, block=256, splits=8)
        assert torch.equal(keys, _expected(raw, layout, 1.0, None))
    torch.cuda.synchronize()
    for acc, count in _workspaces.values():
        assert bool((acc == MASKED).all()) and not bool(count.any())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a real vocabulary is too slow for the interpreter")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_real_vocabularies_with_the_default_launch_plan(dtype):
    g = torch.Generator(device="cuda").manual_seed(3)
    for tp in (1, 2, 4, 8):
        layout = vocab_parallel_layout(151936, tp)[tp - 1]
        for batch in (1, 8, 64):
            raw = (torch.randn(batch, layout.size, device="cuda", generator=g) * 20).to(dtype)
            raw[:, 5::97] = raw.max()  # far-apart ties
            for scale, soft_cap in SCALE_CAPS:
                keys = shard_keys(raw, layout, scale=scale, soft_cap=soft_cap)
                assert torch.equal(keys, _expected(raw, layout, scale, soft_cap)), (tp, batch, scale, soft_cap)


def test_decoded_keys_name_the_token():
    layout = LAYOUTS[0]
    raw = _adversarial(layout, torch.float32)
    ids = decode_ids(shard_keys(raw, layout, scale=1.0, soft_cap=None))
    assert ids.tolist() == local_best(raw, layout)[1].tolist()
