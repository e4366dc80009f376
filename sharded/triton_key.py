"""``triton_key``: the packed-key local argmax with soft cap, scale, masks and the key fused into one Triton kernel.

Each rank runs torch's ``F.linear`` (rule 1's matmul stays torch's); ONE kernel launch then reads the shard's raw
logits once and writes ``encode_keys(*local_best(head_logits(...)))`` bit for bit, one int64 key per row; one
``all_reduce(MAX)`` of the keys picks the token.

Grid ``(B, splits)``: program ``(row, part)`` folds a chunk of the row's columns, ``block`` at a time (unmasked,
vectorised loads but for the tail), into each lane's first maximal int32 order-preserving value and its column,
then packs one int64 key per lane and takes one ``tl.max``.  With one part per row it stores that key.  With
several (small B, where one program per row would leave most SMs idle), each part ``atomic_max``-es it into a
per-row accumulator, then ``atomic_add``-s a per-row counter (acq_rel: its max is in first); the last part to
arrive swaps the accumulator back to the sentinel, zeroes the counter and stores the key.  The workspace is thus
left initialised for the next call, cached per (device, stream): no fill launch and no second reduction launch.

Rounding: torch computes each elementwise op in fp32 and rounds to the tensor's dtype, so the kernel rounds after
each step (bf16 by integer round-to-nearest-even: Triton's interpreter truncates), without FMA contraction.  On
CUDA torch divides by a Python scalar as ``x * (1f / cap)``, on the CPU it truly divides: the kernel does what
torch does where the logits live.  ``tanh`` is libdevice's ``__nv_tanhf``, CUDA's ``tanhf`` that torch calls, but
for ``|x| < 2**-13`` where it is ``x`` (Triton links libdevice flushing subnormals to zero).  The interpreter has
no libdevice: there ``tanh`` is computed in fp64, which matches torch's CPU ``tanh`` on every bf16 and fp16 input
but not on every fp32 one (tests/test_triton_key.py checks both).
"""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
from collections.abc import Callable

import torch

from reference.checks import check_scale
from sharded.keys import decode_ids, encode_keys
from sharded.layout import ShardLayout, vocab_parallel_layout
from sharded.local_argmax import checked_shard_logits, map_d2t
from sharded.triton_env import TRITON_LOCK, interpreting
from sharded.triton_env import why_unavailable as _why_unavailable

try:  # the default install has no Triton: this module must still import
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None

MASKED = -(2**63) + 1  # below every real key (-inf's is about -2**63 + 2**55): non-tokens never win
_KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
TILE = 2048  # logits a program reads per loop step: 8 a thread at 8 warps (47-55 registers, no spills on sm_90)
PROGRAMS_PER_SM = 8  # small batches split rows until about this many programs per SM
_workspaces: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def why_unavailable() -> str | None:
    """Why the kernel cannot run here (no Triton, no GPU), or None."""
    return _why_unavailable("triton_key")


def triton_available() -> bool:
    """Whether the kernel can run here: Triton imports and there is a GPU (or Triton's CPU interpreter is on)."""
    return why_unavailable() is None


if triton is not None:
    from triton.language.extra import libdevice

    _MASKED: tl.constexpr = tl.constexpr(MASKED)

    @triton.jit
    def _load(ptrs, mask, KIND: tl.constexpr):
        """fp32 values (bf16 arrives as int16 bits: the interpreter's bf16 cast is inexact); unmasked ones vectorise."""
        if mask is None:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=mask, other=0)
        if KIND == 1:
            x = (x.to(tl.int32) << 16).to(tl.float32, bitcast=True)
        return x.to(tl.float32)

    @triton.jit
    def _round(x, KIND: tl.constexpr):
        """fp32 ``x`` rounded to the head's dtype (and back): what storing a torch result in that dtype does."""
        if KIND == 1:  # bf16: round to nearest even on the bits; NaN stays NaN
            bits = x.to(tl.int32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
            x = tl.where(x != x, x, bits.to(tl.float32, bitcast=True))
        elif KIND == 2:
            x = x.to(tl.float16).to(tl.float32)
        return x

    @triton.jit
    def _tanh(x, LIBDEVICE: tl.constexpr):
        if LIBDEVICE:  # CUDA's tanhf returns x below 2**-13; Triton's flush-to-zero libdevice would flush subnormals
            y = tl.where(tl.abs(x) < 0.0001220703125, x, libdevice.tanh(x))
        else:  # the interpreter: correctly rounded in practice (fp64, no cancellation near 0)
            d = x.to(tl.float64)
            a = tl.abs(d)
            t = tl.exp(-2.0 * a)
            big = (1.0 - t) / (1.0 + t)
            s = tl.minimum(a, 0.0009765625)  # below 2**-10 the series, three terms, is exact to fp64
            y = tl.where(a < 0.0009765625, s - s * s * s / 3.0 + 2.0 * s * s * s * s * s / 15.0, big)
            y = tl.where(d < 0, -y, y).to(tl.float32)
            y = tl.where((x != x) | (x == 0), x, y)  # NaN and the sign of zero pass through
        return y

    @triton.jit
    def _logits(
        x, cap, inv_cap, scale, KIND: tl.constexpr, HAS_CAP: tl.constexpr, RECIPROCAL: tl.constexpr,
        LIBDEVICE: tl.constexpr, HAS_SCALE: tl.constexpr,
    ):  # fmt: skip
        """rule 1 after the matmul: ``tanh(l / cap) * cap`` then ``l * scale``, rounded after every op."""
        if HAS_CAP:
            x = _round(x * inv_cap if RECIPROCAL else x / cap, KIND)
            x = _round(_tanh(x, LIBDEVICE), KIND)
            x = _round(x * cap, KIND)
        if HAS_SCALE:
            x = _round(x * scale, KIND)
        return x

    @triton.jit
    def _ordered(v):
        """``encode_keys``'s high word: int32 bits whose order is v's, -0 as +0, every NaN 0x7FC00000 (above +inf)."""
        v = tl.where(v == 0.0, 0.0, v)
        bits = tl.where(v != v, 0x7FC00000, v.to(tl.int32, bitcast=True))
        return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)

    @triton.jit
    def _pack(ordered, ids):  # encode_keys(v, ids) is _pack(_ordered(v), ids)
        return (ordered.to(tl.int64) << 32) | (4294967295 - ids.to(tl.int64))

    @triton.jit
    def _tile(
        best, best_col, base, col, inside, num_real, added_row, num_added, cap, inv_cap, scale,
        KIND: tl.constexpr, HAS_CAP: tl.constexpr, RECIPROCAL: tl.constexpr, LIBDEVICE: tl.constexpr,
        HAS_SCALE: tl.constexpr,
    ):  # fmt: skip
        """Fold columns ``col`` into each lane's first maximum (``inside``: the tail's mask, None for a full tile)."""
        x = _load(base + col, inside, KIND)
        v = _logits(x, cap, inv_cap, scale, KIND, HAS_CAP, RECIPROCAL, LIBDEVICE, HAS_SCALE)
        token = (col < num_real) | ((col >= added_row) & (col < added_row + num_added))
        if inside is not None:
            token = token & inside
        ordered = tl.where(token, _ordered(v), -2147483648)
        better = ordered > best  # strict: a lane keeps its first maximum (columns rise, and so do ids)
        return tl.where(better, ordered, best), tl.where(better, col, best_col)

    @triton.jit
    def _shard_keys_kernel(
        raw, out, acc, count, stride, extent, num_real, added_row, num_added, start, added_start, chunk, splits,
        cap, inv_cap, scale,
        KIND: tl.constexpr, HAS_CAP: tl.constexpr, RECIPROCAL: tl.constexpr, LIBDEVICE: tl.constexpr,
        HAS_SCALE: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0)
        lo = tl.program_id(1) * chunk
        hi = tl.minimum(lo + chunk, extent)
        base = raw + row.to(tl.int64) * stride
        # per lane: the first maximal ordered value and its column (int32 work per logit; int64 once per lane)
        best = tl.full([BLOCK], -2147483648, tl.int32)  # below -inf's: no token yet
        best_col = tl.zeros([BLOCK], tl.int32)
        full = lo + (hi - lo) // BLOCK * BLOCK
        for off in range(lo, full, BLOCK):
            best, best_col = _tile(
                best, best_col, base, off + tl.arange(0, BLOCK), None, num_real, added_row, num_added,
                cap, inv_cap, scale, KIND, HAS_CAP, RECIPROCAL, LIBDEVICE, HAS_SCALE,
            )  # fmt: skip
        if full < hi:
            col = full + tl.arange(0, BLOCK)
            best, best_col = _tile(
                best, best_col, base, col, col < hi, num_real, added_row, num_added,
                cap, inv_cap, scale, KIND, HAS_CAP, RECIPROCAL, LIBDEVICE, HAS_SCALE,
            )  # fmt: skip
        ids = tl.where(best_col >= added_row, added_start + (best_col - added_row), start + best_col)
        top = tl.max(tl.where(best == -2147483648, _MASKED, _pack(best, ids)), axis=0)
        if SPLIT:
            tl.atomic_max(acc + row, top)
            if tl.atomic_add(count + row, 1) == splits - 1:  # the last part: every max is in
                tl.store(out + row, tl.atomic_xchg(acc + row, _MASKED))
                tl.atomic_xchg(count + row, 0)
        else:
            tl.store(out + row, top)


def _workspace(device: torch.device, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row accumulators (sentinel) and counters (0) that the kernel leaves as it found them."""
    if device.type != "cuda":  # the interpreter: no stream orders the calls, so fresh ones
        return torch.full((rows,), MASKED, dtype=torch.int64), torch.zeros(rows, dtype=torch.int32)
    key, size = (device, torch.cuda.current_stream(device).stream_id), max(rows, 64)
    if key not in _workspaces or _workspaces[key][0].numel() < rows:
        acc = torch.full((size,), MASKED, dtype=torch.int64, device=device)
        _workspaces[key] = acc, torch.zeros(size, dtype=torch.int32, device=device)
    return _workspaces[key]


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def shard_keys(
    raw_logits: torch.Tensor,
    layout: ShardLayout,
    *,
    scale: float,
    soft_cap: float | None,
    block: int | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """One rank's keys ``[B]`` from its raw ``F.linear`` logits ``[B, layout.size]``, in one kernel launch.

    ``block`` (a power of two) and ``splits`` (programs per row) override the launch plan, for tests.
    """
    rows, device = raw_logits.shape[0], raw_logits.device
    if not triton_available() or not (device.type == "cuda" or interpreting()):
        raise RuntimeError(f"triton_key needs Triton and CUDA tensors (or TRITON_INTERPRET=1), got {device} logits")
    extent = layout.added_row + layout.num_added if layout.num_added else layout.num_real
    if not extent or not rows:  # no token: -inf at the first id, as local_best offers
        key = encode_keys(torch.tensor([-math.inf]), torch.tensor([layout.start]))
        return key.to(device).expand(rows).clone()
    raw = raw_logits if raw_logits.stride(-1) == 1 else raw_logits.contiguous()
    if not block:  # smaller tiles while too few programs would be in flight (latency, not bandwidth, bound)
        block, sms = TILE, _sm_count(device)
        while block > 512 and rows * triton.cdiv(extent, block) < 2 * sms:
            block //= 2
    tiles = triton.cdiv(extent, block)
    splits = min(splits or triton.cdiv(PROGRAMS_PER_SM * _sm_count(device), rows), tiles)
    chunk = triton.cdiv(tiles, splits) * block
    splits = triton.cdiv(extent, chunk)
    out = torch.empty(rows, dtype=torch.int64, device=device)
    acc, count = _workspace(device, rows) if splits > 1 else (out, out)
    scalars, flags = logit_args(raw, scale, soft_cap)
    on_device = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with TRITON_LOCK, on_device:  # one launch at a time (sharded.triton_env); Triton launches on the current
        _shard_keys_kernel[(rows, splits)](  # device, not the tensor's (a rank per GPU in one process)
            raw.view(torch.int16) if raw.dtype == torch.bfloat16 else raw, out, acc, count, raw.stride(0), extent,
            layout.num_real, layout.added_row, layout.num_added, layout.start, layout.added_start, chunk, splits,
            *scalars, **flags, SPLIT=splits > 1, BLOCK=block, num_warps=max(1, min(8, block // 256)),
            enable_fp_fusion=False,  # every op rounds on its own, as torch's do
        )  # fmt: skip
    return out


@functools.lru_cache(maxsize=64)
def _fp32_scalars(scale: float, cap: float) -> tuple[float, float, float]:
    def fp32(x: float) -> float:
        return float(torch.tensor(x, dtype=torch.float32))

    return fp32(cap), fp32(1.0 / cap), fp32(scale)


def logit_args(raw: torch.Tensor, scale: float, soft_cap: float | None) -> tuple[tuple[float, ...], dict]:
    """``_logits``'s ``(cap, inv_cap, scale)`` and flags: fp32 scalars, as torch turns Python scalars into fp32
    opmath, and the reciprocal because CUDA torch divides by a scalar through it: the Python float's, rounded once
    (measured on torch 2.11, an H200: ``x / 0.001`` is ``x * 1000.0f``, not ``x * (1f / 0.001f)``)."""
    scalars = _fp32_scalars(scale, soft_cap or 1.0)
    flags = dict(KIND=_KINDS[raw.dtype], HAS_CAP=soft_cap is not None, RECIPROCAL=raw.device.type == "cuda")
    return scalars, flags | dict(LIBDEVICE=not interpreting(), HAS_SCALE=scale != 1.0)


def triton_key(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group) -> torch.Tensor:
    """The packed-key path with the cap, scale, masks and key in one kernel per rank; one ``all_reduce(MAX)``."""
    check_scale(scale, soft_cap)
    raw = checked_shard_logits(hidden, weight, bias, layout, 1.0, None)  # the built-ins' checks; F.linear only
    keys = shard_keys(raw, layout, scale=scale, soft_cap=soft_cap)
    return map_d2t(decode_ids(group.all_reduce(keys, op="max")), d2t, layout)


def _time_us(fn: Callable[[], object], repeats: int, flush: torch.Tensor) -> float:
    """Median GPU time of one call, L2 flushed before each (a shard of 38 MB would otherwise stay cached)."""
    fn()
    times = []
    for _ in range(repeats):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def benchmark(
    batches: tuple[int, ...] = (1, 8, 64),
    tps: tuple[int, ...] = (1, 2, 4, 8),
    vocab: int = 151936,
    soft_caps: tuple[float | None, ...] = (None, 30.0),
    repeats: int = 100,
    extra: dict[str, Callable[[torch.Tensor, float | None], object]] | None = None,
) -> list[dict]:
    """Per-rank-shard µs on CUDA (rank 0's fp32 logits ``[B, ceil(V/tp)]``): torch's ``max`` (after torch's cap),
    ``shard_keys``, each of ``extra`` (``fn(logits, soft_cap)``, e.g. SGLang's kernel) and the 4.3 TB/s floor."""
    if not torch.cuda.is_available():
        raise RuntimeError("benchmark needs CUDA")
    flush, rows = torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), []
    for tp in tps:
        layout = vocab_parallel_layout(vocab, tp)[0]
        for batch in batches:
            logits = torch.randn(batch, layout.size, device="cuda")
            for cap in soft_caps:

                def torch_max(logits=logits, cap=cap):
                    return (logits if cap is None else torch.tanh(logits / cap) * cap).max(dim=-1)

                def fused(logits=logits, layout=layout, cap=cap):
                    return shard_keys(logits, layout, scale=1.0, soft_cap=cap)

                fns = {"torch": torch_max, "triton_key": fused}
                fns |= {name: (lambda f=f, x=logits, c=cap: f(x, c)) for name, f in (extra or {}).items()}
                row = {"B": batch, "tp": tp, "cap": "off" if cap is None else cap}
                row["floor"] = round(logits.numel() * 4 / 4.3e12 * 1e6, 2)
                rows.append(row | {name: round(_time_us(fn, repeats, flush), 2) for name, fn in fns.items()})
    return rows
