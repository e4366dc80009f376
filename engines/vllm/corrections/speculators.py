"""The project's correction of Model Runner V2's greedy draft pick with the switch off (V16 of vLLM 0.34.0's page).

From 0.34.0 on, ``DraftModelSpeculator.sample_draft`` picks a greedy draft token with ``greedy_argmax``
(``vllm/v1/worker/gpu/sample/greedy_argmax.py``), which takes a NaN logit as ``-inf``; with
``use_local_argmax_reduction`` on, the same draft step takes ``LogitsProcessor.get_top_tokens``, whose maximum is the
NaN, as ``torch.argmax`` (0.33.0's pick) and the contract take it.  The correction picks as ``torch.argmax`` does: the
first maximal index, a NaN the largest, so the switch no longer changes a row's token.  A release without
``greedy_argmax`` (0.32.0, 0.33.0) gets no patch (:data:`PATCHES` is empty there).
"""

from __future__ import annotations

import torch

from engines.findings import Patch
from engines.vllm.wheel.discovery import ships

_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.speculator"


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """The greedy pick the contract takes: the first maximal index of each row, a NaN the largest."""
    return logits.argmax(dim=-1)


_GREEDY = "vllm.v1.worker.gpu.sample.greedy_argmax"  # 0.34.0 on
PATCHES: tuple[Patch, ...] = (Patch(f"{_SPECULATOR}:greedy_argmax", greedy_argmax),) if ships(_GREEDY) else ()
