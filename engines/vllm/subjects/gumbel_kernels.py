"""Two small Triton drivers around vLLM's own ``gumbel_noised_argmax`` (``vllm/v1/worker/gpu/sample/gumbel.py``).

Imported only where Triton is (``engines.vllm.subjects.gumbel`` imports it lazily).  Neither restates vLLM's noise: both
call vLLM's function, which hashes (seed, pos, key), turns the hash into Gumbel noise, divides by the temperature,
adds the noise and reduces.

* :func:`shard_argmax` runs it over one rank's token logits in blocks of 1024 columns, with the keys given (the
  tokens' global ids, or their columns as ``gumbel_sample`` passes them), as ``_gumbel_sample_kernel`` runs it over
  a full row: one (value, column) pair per block.
* :func:`noise` reads vLLM's noise back: each token alone is one reduction of a single logit 0.0 at temperature 1,
  whose value is ``0.0 / 1.0 + noise``, the noise itself.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engines.vllm.wheel.triton_files import GUMBEL, load
from sharded.triton_env import interpreting

g = load(GUMBEL)
BLOCK = 1024  # gumbel_sample's BLOCK_SIZE


@triton.jit
def _seed_as_is(seed, step):
    return seed


# The release's own step seed (0.33.0 on); before it, a stand-in the kernel never calls (MIX is off there).  A
# compiled kernel resolves every name it holds, a branch its constexprs turn off included: g.spec_step_seed
# itself would not compile against 0.32.0's file.
_step_seed = getattr(g, "spec_step_seed", _seed_as_is)


def _rows_per_program() -> int:
    """The interpreter runs one program at a time in Python, so there a program takes up to 64 rows of one
    temperature (a [BLOCK, rows] tile, reduced over its first axis as vLLM reduces a block); compiled, one row."""
    return 64 if interpreting() else 1


@triton.jit
def _shard_kernel(
    logits_ptr, n, keys_ptr, rows_ptr, nrows, seed_ptr, pos_ptr, temp, val_ptr, col_ptr, blocks,
    BLOCK: tl.constexpr, ROWS: tl.constexpr, DRAFT: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = r < nrows
    row = tl.load(rows_ptr + r, mask=rmask, other=0).to(tl.int64)
    block = tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < n
    mask = cmask[:, None] & rmask[None, :]
    x = tl.load(logits_ptr + row[None, :] * n + cols[:, None], mask=mask, other=float("-inf")).to(tl.float32)
    keys = tl.load(keys_ptr + cols, mask=cmask, other=0)[:, None]
    seed = tl.load(seed_ptr + row, mask=rmask, other=0)[None, :]
    pos = tl.load(pos_ptr)
    value, idx = g.gumbel_noised_argmax(x, keys, mask, seed, pos, temp, IS_DRAFTING=DRAFT, USE_FP64=False)
    tl.store(val_ptr + row * blocks + block, value, mask=rmask)
    tl.store(col_ptr + row * blocks + block, block * BLOCK + idx, mask=rmask)


@triton.jit
def _noise_kernel(
    seed_ptr, keys_ptr, total, n, pos_ptr, out_ptr,
    BLOCK: tl.constexpr, DRAFT: tl.constexpr, STEP: tl.constexpr, MIX: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = i < total
    keys = tl.load(keys_ptr + i, mask=mask, other=0)
    seed = tl.load(seed_ptr + i // n, mask=mask, other=0)
    if MIX:  # the draft walk's seed at step STEP, mixed by vLLM's own spec_step_seed
        seed = _step_seed(seed, STEP)
    pos = tl.load(pos_ptr)
    zero = tl.zeros([1, BLOCK], dtype=tl.float32)
    value, _ = g.gumbel_noised_argmax(
        zero, keys[None, :], mask[None, :], seed[None, :], pos, 1.0, IS_DRAFTING=DRAFT, USE_FP64=False
    )
    tl.store(out_ptr + i, value, mask=mask)


def shard_argmax(
    values: torch.Tensor, keys: torch.Tensor, seed: torch.Tensor, temperature: torch.Tensor, *, drafting: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row and block of 1024 columns, vLLM's (noised maximum float32, column): ``[B, blocks]`` each; the rows
    of one temperature run together (vLLM's function takes one temperature per call)."""
    values = values.contiguous()
    batch, n = values.shape
    blocks = max(1, triton.cdiv(n, BLOCK))
    val = values.new_empty(batch, blocks, dtype=torch.float32)
    col = values.new_empty(batch, blocks, dtype=torch.int64)
    keys = keys.to(values.device, torch.int64).contiguous()
    seed = seed.to(values.device, torch.int64).contiguous()
    pos = torch.zeros(1, dtype=torch.int64, device=values.device)
    temperature = temperature.float().cpu()
    per = _rows_per_program()
    for temp in temperature.unique().tolist():
        rows = (temperature == temp).nonzero().flatten().to(values.device)
        grid = (triton.cdiv(rows.numel(), per), blocks)
        _shard_kernel[grid](
            values, n, keys, rows, rows.numel(), seed, pos, temp, val, col, blocks,
            BLOCK=BLOCK, ROWS=per, DRAFT=drafting,
        )  # fmt: skip
    return val, col


def noise(seeds: torch.Tensor, ids: torch.Tensor, *, drafting: bool, step: int = 0) -> torch.Tensor:
    """vLLM's float32 Gumbel noise of (row seed, position 0, key id): ``[B, n]``; at a draft walk's ``step``, the
    seed as the release's walk keys that step (``spec_step_seed`` from 0.33.0 on, the seed itself before)."""
    keys = (ids if ids.dim() == 2 else ids.unsqueeze(0).expand(seeds.shape[0], -1)).to(torch.int64).contiguous()
    seeds = seeds.to(keys.device, torch.int64).contiguous()
    batch, n = keys.shape
    out = torch.empty(batch, n, dtype=torch.float32, device=keys.device)
    block = 16384 if interpreting() else BLOCK
    if batch and n:
        pos = torch.zeros(1, dtype=torch.int64, device=keys.device)
        grid = (triton.cdiv(batch * n, block),)
        mix = bool(step) and hasattr(g, "spec_step_seed")
        _noise_kernel[grid](seeds, keys, batch * n, n, pos, out, BLOCK=block, DRAFT=drafting, STEP=step, MIX=mix)
    return out
