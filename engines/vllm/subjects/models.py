"""vLLM's model classes under test: each class that exposes ``get_top_tokens`` (or a local top-k), on its own head.

The classes are found in the installed wheel by :mod:`engines.vllm.wheel.discovery`.  Each subject is an implementation
under the suite's contract, named ``engines.vllm.models:NAME.PATH`` (module ``__getattr__``; :data:`SPEC`, the name
the pages record, which ``sharded.impls.MOVED`` finds here):

- ``NAME.get_top_tokens``: the class's local argmax (``use_local_argmax_reduction``);
- ``NAME.compute_logits``: its classic path, ``compute_logits(h).argmax(-1)``;
- ``NAME.get_top_k_tokens``: its local top-k (``compute_candidates``), where it has one.

The subjects live by family (``dense``, ``eagle``, ``mtp``, ``gemma4``, ``topk``), built with
:mod:`engines.vllm.wheel.build`. ``fn.start`` builds the class once per rank process for the group's tp (after
:func:`start_vllm`), from a tiny config on the CPU, offline, or reproduces its head where it cannot be built;
``fn.head`` pins every case to the head that build really has, and ``SUBJECTS[name].how`` says which.  Each call copies
this rank's rows into the class's head and calls the class's method; nothing is validated or fixed on vLLM's behalf.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from engines.versions import vllm_release
from engines.vllm.subjects import dense, eagle, gemma4, mtp, topk
from engines.vllm.subjects.layer import runs_in_vllm, start_vllm
from engines.vllm.wheel.build import Built, Subject

SPEC = "engines.vllm.models"
RELEASE = vllm_release()  # the release whose classes are offered
EVERY: dict[str, Subject] = {n: s for family in (dense, eagle, mtp, gemma4, topk) for n, s in family.SUBJECTS.items()}
SUBJECTS: dict[str, Subject] = {name: subject for name, subject in EVERY.items() if subject.shipped_in(RELEASE)}

_EMBEDDING = "an embedding/pooling model: inherits get_top_tokens from {} but never decodes, so it is not run"
_UNCHANGED = "its module does not import here ({}); it inherits {}'s get_top_tokens unchanged: covered by {}"

# Discovered classes with a method and no subject of their own: how each is covered, or why it is not run.
COVERAGE: dict[str, str] = {
    "LocalArgmaxMixin": "the mixin itself, not a model: runs in every subject that inherits it (LlamaForCausalLM, ...)",
    "DeepseekV32MultiTokenPredictor": "runs through DeepseekV32MTP.get_top_tokens, which calls it",
    "DeepSeekV4MultiTokenPredictor": "runs through DeepSeekV4MTP.get_top_tokens (AMD module), which calls it",
    "Glm5NextMultiTokenPredictor": "runs through Glm5NextMTP.get_top_tokens, which calls it",
    "Step5MultiTokenPredictor": "runs through Step5MTP.get_top_tokens, which calls it (0.33.0 on)",
    "MuseSparkForConditionalGeneration": "MuseSpark1x with vision and audio (0.33.0 on): it inherits "
    "MuseSpark1xForCausalLM's compute_logits and get_top_tokens unchanged: covered by MuseSpark1xForCausalLM",
    "Dots3NoteMTP": _UNCHANGED.format("needs a newer flash-attn helper", "DeepseekV32MTP", "DeepseekV32MTP"),
    "Dots3NoteMultiTokenPredictor": _UNCHANGED.format(
        "needs a newer flash-attn helper", "DeepseekV32MultiTokenPredictor", "DeepseekV32MTP"
    ),
    "Qwen3_5MoeMTP": _UNCHANGED.format("torchvision", "Qwen3_5MTP", "Qwen3_5MTP"),
    "RicursiveDFlash2ForCausalLM": "DFlash2Qwen3ForCausalLM with its own decoder layers (0.34.0 on): it inherits "
    "DFlash2Qwen3ForCausalLM's get_top_tokens and compute_candidates unchanged: covered by DFlash2Qwen3ForCausalLM",
    "MiniMaxM3DSparkForCausalLM": "a DSpark draft of MiniMax M3 (0.34.0 on): it inherits Qwen3DSparkForCausalLM's "
    "get_top_tokens and compute_logits unchanged: covered by Qwen3DSparkForCausalLM",
    "InternS2MobiusMTP": _UNCHANGED.format("torchvision", "Qwen3_5MTP", "Qwen3_5MTP"),
    "Qwen3LLMForCausalLM": _UNCHANGED.format("torchvision", "Qwen3ForCausalLM", "Qwen3ForCausalLM")
    + " (its constructor makes the same untied/tied ParallelLMHead and LogitsProcessor(vocab_size))",
    "LlamaBidirectionalModel": _EMBEDDING.format("LlamaForCausalLM"),
    "LlamaBidirectionalForSequenceClassification": _EMBEDDING.format("LlamaForCausalLM") + " (a classifier)",
    "JinaEmbeddingsV5DecoderModel": _EMBEDDING.format("Qwen3ForCausalLM"),
    "JinaEmbeddingsV5EncoderModel": _EMBEDDING.format("LlamaForCausalLM"),
    "JinaEmbeddingsV5Model": _EMBEDDING.format("JinaEmbeddingsV5DecoderModel"),
}


# ---------------------------------------------------------------------------------------------------- the callables

_built: dict[str, Built] = {}  # this rank process's builds, by subject name


def _get(name: str) -> Built:
    if name not in _built:
        _built[name] = SUBJECTS[name].build()
    return _built[name]


def _load(
    name: str,
    weight: torch.Tensor,
    bias: Any,
    layout: Any,
    scale: float,
    soft_cap: float | None,
    d2t: torch.Tensor | None,
) -> Built:
    """This rank's rows (and ``d2t``) into the class's head, then ``process_weights_after_loading`` as vLLM does."""
    subject, built = SUBJECTS[name], _get(name)
    pin = subject.head
    asked = {
        "scale": scale,
        "soft_cap": soft_cap,
        "bias": bias is not None,
        "logits_vocab": layout.vocab,
        "vocab": layout.org_vocab,
        "added": layout.added_vocab,
        "padding_size": layout.padding_size,
    }
    fixed = dict(pin, logits_vocab=pin["logits_vocab"] or pin["vocab"] + pin["added"])
    wrong = {k: (v, fixed[k]) for k, v in asked.items() if v != fixed[k]}
    if wrong:
        raise RuntimeError(f"{name} is built for another head: {wrong} (asked, built); pin cases with fn.head")
    head = built.head.weight
    if tuple(head.shape) != tuple(weight.shape) or head.dtype != weight.dtype:
        raise RuntimeError(
            f"{name}'s head shard is {tuple(head.shape)} {head.dtype}; this rank's rows are "
            f"{tuple(weight.shape)} {weight.dtype}"
        )
    if (built.d2t is None) != (d2t is None):
        raise RuntimeError(
            f"{name} {'has no' if built.d2t is None else 'carries a'} draft_id_to_target_id; "
            f"the case {'has one' if d2t is not None else 'has none'}: pin cases with fn.head"
        )
    head.data.copy_(weight)
    if built.d2t is not None:
        built.d2t.data.copy_(d2t)
    built.head.quant_method.process_weights_after_loading(built.head)
    if built.reset is not None:
        built.reset()
    return built


@cache
def _impl(name: str, path: str) -> Callable[..., Any]:
    subject = SUBJECTS[name]

    def start(group: Any) -> None:
        start_vllm(group)
        _get(name)

    if path == "get_top_k_tokens":

        def fn(*, hidden, weight, bias, layout, k, scale, soft_cap, d2t, group):
            ids, values = _load(name, weight, bias, layout, scale, soft_cap, d2t).call[path](hidden, k)
            return ids, values

    else:

        def fn(*, hidden, weight, bias, layout, scale, soft_cap, d2t, group):
            return _load(name, weight, bias, layout, scale, soft_cap, d2t).call[path](hidden)

    fn.__name__ = fn.__qualname__ = f"{name}.{path}"
    fn.__doc__ = f"vLLM's {subject.cls}.{path} ({subject.how})"
    runs_in_vllm(fn, start)  # needs: vLLM, and its shared-memory communicator where TPARGMAX_VLLM_SHM=1
    fn.head = dict(subject.head)
    fn.how = subject.how
    if path == "get_top_k_tokens":
        fn.values = subject.values
    return fn


def specs() -> list[str]:
    """Every ``--impl`` spec this module offers."""
    return [f"{SPEC}:{n}.{p}" for n, s in SUBJECTS.items() for p in s.paths]


def __getattr__(attr: str) -> Callable[..., Any]:
    name, _, path = attr.rpartition(".")
    subject = SUBJECTS.get(name)
    if name in EVERY and subject is None:  # a later release's class: a repro file of its page, replayed here
        since = EVERY[name].since
        raise AttributeError(
            f"{name} ships from vLLM {since} on, and vLLM {RELEASE} is the release here: replay it in the "
            f"environment of `tpargmax install-vllm --version {since}`"
        )
    if subject is None or path not in subject.paths:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r} (offered: {', '.join(specs())})")
    return _impl(name, path)
