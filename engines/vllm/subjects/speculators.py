"""Model Runner V2's speculators under test: the switch where each speculator reaches it.

Every speculator the installed wheel ships whose propose step reaches ``sample_draft``, where the switch routes the
pick (:func:`engines.vllm.wheel.speculators.scan`: found, not listed), is two subjects, named
``engines.vllm.speculators:NAME.local_draft`` and ``NAME.classic_draft``: the class's own ``sample_draft``, called
as its propose step calls it for a greedy draft (no draft-logits cache), with ``use_local_argmax_reduction`` on (its
``get_draft_top_tokens``) and off (its ``compute_draft_logits``, then its greedy pick), at the draft's second step
(``spec_step_idx=1``), on a stand-in that holds the class's own methods and none of its constructor's GPU buffers.

The draft model it loaded is vLLM's head for the case: ``ParallelLMHead`` and ``LogitsProcessor`` with
``LocalArgmaxMixin.get_top_tokens`` and, for the classic path, the processor's gathered logits with EAGLE3's scatter
where the case has a ``d2t``.  Where the speculator's classic path selects a module by step (its
``compute_draft_logits`` hands the model ``spec_step_idx``: asked of the class itself), the draft has a head per
step: the case's rows at step 1 and their negation at step 0, so a local path that takes another step's head than
the classic path's returns another token.  Nothing is validated or fixed on vLLM's behalf.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from engines.vllm.subjects import layer
from engines.vllm.wheel import speculators as wheel

SPEC = __name__
STEP = 1  # the draft step every call makes: the second, so a step index taken for 0 shows
PATHS = {"local_draft": True, "classic_draft": False}  # path -> use_local_argmax_reduction


class _StepDraft:
    """The draft model a speculator loaded: a head per step where its classic path selects one, else one head.
    ``spec_step_idx`` defaults to 0, as the MTP classes' methods do."""

    def __init__(self, modules: dict[int, Any], per_step: bool) -> None:
        self.modules, self.per_step = modules, per_step

    def _module(self, spec_step_idx: int | None) -> Any:
        return self.modules[spec_step_idx or 0] if self.per_step else self.modules[STEP]

    def get_top_tokens(self, hidden_states: torch.Tensor, spec_step_idx: int | None = None) -> torch.Tensor:
        from vllm.model_executor.models.interfaces import LocalArgmaxMixin

        return LocalArgmaxMixin.get_top_tokens(self._module(spec_step_idx), hidden_states)

    def compute_logits(self, hidden_states: torch.Tensor, spec_step_idx: int | None = None) -> torch.Tensor:
        return self._module(spec_step_idx).classic_logits(hidden_states)


class _Recorder:
    """A model that records the step index the speculator's classic path hands it."""

    def __init__(self) -> None:
        self.steps: list[Any] = []

    def compute_logits(self, hidden_states: torch.Tensor, spec_step_idx: Any = None) -> torch.Tensor:
        self.steps.append(spec_step_idx)
        return hidden_states


@cache
def selects_by_step(name: str) -> bool:
    """Whether the speculator's classic path (``compute_draft_logits``) hands the model the step index."""
    cls = wheel.load(_found()[name])
    speculator = wheel.stand_in(cls)
    speculator.model = recorder = _Recorder()
    cls.compute_draft_logits(speculator, torch.zeros(1, 1), STEP)
    return recorder.steps == [STEP]


@cache
def _found() -> dict[str, wheel.Speculator]:
    return {s.name: s for s in wheel.scan() if s.reaches_the_switch}


@cache
def _step_head(step: int, org: int, added: int, padding_size: int, hidden: int, dtype: torch.dtype) -> Any:
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return ParallelLMHead(org + added, hidden, org_num_embeddings=org, padding_size=padding_size, params_dtype=dtype)


def _draft(layout: Any, weight: torch.Tensor, bias: Any, scale: float, soft_cap: float | None, d2t: Any, step: int):
    """vLLM's head for one step, loaded with this rank's rows (step 1) or their negation (step 0)."""
    sign = 1.0 if step == STEP else -1.0
    head = _step_head(step, layout.org_vocab, layout.added_vocab, layout.padding_size, weight.shape[-1], weight.dtype)
    head.weight.data.copy_(weight * sign)
    head.quant_method.process_weights_after_loading(head)
    processor = layer._processor(layout.org_vocab + layout.added_vocab, layout.vocab, scale, soft_cap)
    rows_bias = None if bias is None else bias * sign
    module = layer._Draft(processor, head, d2t, rows_bias)
    module.classic_logits = lambda hidden: layer.classic_logits(processor, head, hidden, rows_bias, d2t)
    return module


def _arguments(method: Callable[..., Any], hidden: torch.Tensor) -> dict[str, Any]:
    """``sample_draft``'s keywords for a greedy draft of the batch at :data:`STEP`, as its signature names them."""
    rows = hidden.shape[0]
    known = {
        "hidden_states": hidden,
        "sample_src_positions": torch.arange(rows, dtype=torch.int64),
        "idx_mapping": torch.arange(rows, dtype=torch.int32),
        "temperature": torch.tensor([0.0, 0.7], dtype=torch.float32).repeat(rows)[:rows],  # greedy and sampled rows
        "seeds": torch.arange(rows, dtype=torch.int64),
        "draft_step": torch.full((rows,), STEP, dtype=torch.int64),
        "draft_logits": None,  # a greedy draft: no cache of draft logits
        "spec_step_idx": STEP,
        "num_steps": STEP + 1,
    }
    params = list(inspect.signature(method).parameters.values())[1:]  # after self
    unknown = [p.name for p in params if p.name not in known and p.default is inspect.Parameter.empty]
    if unknown:
        raise RuntimeError(f"{method.__qualname__} takes {unknown}, which the suite does not know how to give")
    return {p.name: known[p.name] for p in params if p.name in known}


@cache
def _impl(name: str, path: str) -> Callable[..., Any]:
    speculator = _found()[name]
    switch = PATHS[path]

    def fn(*, hidden, weight, bias, layout, scale, soft_cap, d2t, group):
        cls = wheel.load(speculator)
        per_step = selects_by_step(name)
        steps = (0, STEP) if per_step else (STEP,)
        modules = {s: _draft(layout, weight, bias, scale, soft_cap, d2t, s) for s in steps}
        drafter = wheel.stand_in(cls)  # its own methods, none of its constructor's GPU buffers
        drafter.model = _StepDraft(modules, per_step)
        drafter.use_local_argmax_reduction = switch
        drafter.draft_watermarker = drafter.acceptance_estimator = None
        drafter.use_fp64_gumbel = False
        return cls.sample_draft(drafter, **_arguments(cls.sample_draft, hidden))

    fn.__name__ = fn.__qualname__ = f"{name}.{path}"
    owner = speculator.owner("get_draft_top_tokens" if switch else "compute_draft_logits")
    fn.__doc__ = f"vLLM's {name}.sample_draft with use_local_argmax_reduction {'on' if switch else 'off'} ({owner})"
    layer.on_even_heads(layer.runs_in_vllm(fn))
    if not switch:
        fn.path = "classic"
    return fn


def specs() -> list[str]:
    """Every ``--impl`` spec this module offers: two per speculator whose propose step reaches the switch."""
    return [f"{SPEC}:{name}.{path}" for name in _found() for path in PATHS]


def __getattr__(attr: str) -> Callable[..., Any]:
    name, _, path = attr.rpartition(".")
    if not layer.vllm_available():
        raise AttributeError(layer.INSTALL_HINT)
    if name not in _found() or path not in PATHS:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r} (offered: {', '.join(specs())})")
    return _impl(name, path)
