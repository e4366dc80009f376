"""The project's correction of ``MuseSpark1xForCausalLM``'s local argmax (V14 of vLLM 0.33.0's page).

``MuseSpark1xForCausalLM.compute_logits`` puts the processor's logits through the class's output transform (the output
multiplier, then a tanh soft cap: ``MulTanhSoftCap`` where both are set); ``get_top_tokens`` is the inherited
``LocalArgmaxMixin``'s, which ranks the raw logits.  The corrected one ranks each shard's token logits after the same
transform (element-wise, so a shard's values are the gathered row's), by the corrected ranking of
:mod:`engines.vllm.corrections.processor`.  The class ships from 0.33.0 on (:data:`SINCE`), in an NVIDIA and an AMD
module, renamed ``MuseSparkForCausalLM`` in 0.34.0 (:data:`NAMES`).
"""

from __future__ import annotations

from typing import Any

import torch

from engines.findings import Patch
from engines.vllm.corrections import processor as fixes

SINCE = "0.33.0"
_MODULES = ("vllm.models.muse_spark.nvidia.model", "vllm.models.muse_spark.amd.model")


def output_transform(self: Any, logits: torch.Tensor) -> torch.Tensor:
    """What ``compute_logits`` does to the processor's logits, in its order: the fused multiplier and cap where the
    class built one, else float32, the multiplier, the cap."""
    if self.mul_tanh_soft_cap is not None:
        return self.mul_tanh_soft_cap(logits)
    logits = logits.float()
    if self.metap_output_multiplier != 1.0:
        logits = logits * self.metap_output_multiplier
    if self.output_soft_cap_temp is not None:
        logits = self.output_soft_cap_temp * torch.tanh(logits / self.output_soft_cap_temp)
    return logits


def muse_spark_top_tokens(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """``MuseSpark1xForCausalLM.get_top_tokens``: the argmax of what ``compute_logits`` returns, then ``d2t``."""
    transform = lambda logits: output_transform(self, logits)  # noqa: E731
    top = fixes.get_top_tokens(self.logits_processor, self.lm_head, hidden_states, transform=transform)
    d2t = getattr(self, "draft_id_to_target_id", None)
    return top if d2t is None else top + d2t[top]


NAMES = ("MuseSpark1xForCausalLM", "MuseSparkForCausalLM")  # 0.33.0's name, and 0.34.0's for the same class


def patches(name: str) -> tuple[Patch, ...]:
    """The correction of the class ``name`` (one of :data:`NAMES`), in each module that defines it."""
    return tuple(Patch(f"{module}:{name}.get_top_tokens", muse_spark_top_tokens) for module in _MODULES)
