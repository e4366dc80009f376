"""The shared builder of vLLM's model subjects: a tiny config built on the CPU, or the head its constructor makes.

A class that builds on the CPU is built (:func:`causal`, :func:`build_model`).  One that cannot is reproduced: the
head pieces its constructor makes (``ParallelLMHead``, ``LogitsProcessor``, its masking), held by a stand-in that
carries exactly what the method reads, and the class's own method run on it unbound (:func:`reproduced`,
:func:`stand_in`).  The families' subjects (``dense``, ``eagle``, ``mtp``, ``gemma4``, ``topk``) are built from these.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from engines.versions import installed_vllm, release_key
from engines.vllm.wheel.discovery import vllm_root

HIDDEN = 64
MODELS = "vllm.model_executor.models"
NO_CPU_BUILD = "head reproduced from the constructor: "


@dataclass(frozen=True)
class Subject:
    """One class (in one configuration) as an implementation under test."""

    cls: str
    module: str
    head: dict[str, object]  # properties.cases.case.Case overrides: the head this build really has
    build: Callable[[], Any]  # -> Built, in the rank process, after start_vllm
    how: str  # "built" or "head reproduced from the constructor: <why>"
    paths: tuple[str, ...] = ("get_top_tokens", "compute_logits")
    values: str = "logits"  # what its top-k values are: "logits", or "log_probs" (return_log_probs=True)
    since: str = ""  # the first release under test that ships the class, where it is not the first release
    until: str = ""  # the first release under test that no longer ships it (renamed or removed), if any

    def shipped_in(self, release: str) -> bool:
        """Whether ``release`` ships the class: the installed build, by whether its module defines the class (a
        contributor's build holds what it holds, whatever its version says); another release by :attr:`since` and
        :attr:`until`."""
        if release == installed_vllm():
            return holds(self.module, self.cls)
        return shipped(self.since, release) and not (self.until and shipped(self.until, release))


def holds(module: str, cls: str = "") -> bool:
    """Whether the installed vLLM has ``module`` (``vllm.models...``) as a file or package, and where ``cls`` is
    given, a class of that name defined at its top level; read without importing."""
    path = vllm_root().joinpath(*module.split(".")[1:])
    found = next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()), None)
    if found is None or not cls:
        return found is not None
    return any(isinstance(n, ast.ClassDef) and n.name == cls for n in ast.parse(found.read_bytes()).body)


def shipped(since: str, release: str) -> bool:
    """Whether ``release`` ships what first shipped in ``since`` (empty: the first release under test)."""
    return not since or release_key(release) >= release_key(since)


@dataclass
class Built:
    obj: Any  # the model, or the stand-in the class's methods run on
    head: Any  # the ParallelLMHead (or tied embedding) whose rows each call loads
    d2t: torch.nn.Parameter | None = None
    call: dict[str, Callable[..., Any]] = field(default_factory=dict)  # path -> fn(hidden[, k])
    reset: Callable[[], None] | None = None  # what loading the weights resets in the class (caches)


def head_pin(vocab: int, **extra: object) -> dict[str, object]:
    pin = {
        "vocab": vocab,
        "hidden": HIDDEN,
        "added": 0,
        "padding_size": 64,
        "logits_vocab": None,
        "scale": 1.0,
        "soft_cap": None,
        "dtype": "float32",
        "bias": False,
        "specials": (),
        "d2t": "none",
        "target_extra": 0,
    }
    return pin | extra


def llama_config(vocab: int, **extra: object) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": vocab,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    } | extra


def qwen3_config(vocab: int, tied: bool) -> dict[str, object]:
    return llama_config(
        vocab, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16, tie_word_embeddings=tied
    )


def _model_config(directory: str, config: dict[str, object]) -> Any:
    from vllm.config import ModelConfig

    Path(directory, "config.json").write_text(json.dumps(config))
    return ModelConfig(model=directory, skip_tokenizer_init=True, dtype="float32", enforce_eager=True)


def build_model(
    config: dict[str, object], draft: dict[str, object] | None = None, method: str = "eagle3", model_class: Any = None
) -> Any:
    """``initialize_model`` from a tiny config (a draft: from the SpeculativeConfig recipe), on the CPU, offline."""
    from vllm.config import ParallelConfig, SpeculativeConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model

    with tempfile.TemporaryDirectory(prefix="tpargmax-vllm-") as tmp:
        os.mkdir(os.path.join(tmp, "target"))
        target = _model_config(os.path.join(tmp, "target"), config)
        if draft is None:
            vllm_config = VllmConfig(model_config=target)
            with set_current_vllm_config(vllm_config):
                return initialize_model(vllm_config=vllm_config, model_class=model_class)
        os.mkdir(os.path.join(tmp, "draft"))
        Path(tmp, "draft", "config.json").write_text(json.dumps(draft))
        spec = SpeculativeConfig(
            model=os.path.join(tmp, "draft"),
            method=method,
            num_speculative_tokens=1,
            target_model_config=target,
            target_parallel_config=ParallelConfig(),
        )
        vllm_config = VllmConfig(model_config=target, speculative_config=spec)
        with set_current_vllm_config(vllm_config):
            return initialize_model(vllm_config=vllm_config, model_config=spec.draft_model_config)


def model_class(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def standard(obj: Any, cls: Any = None, head: Any = None, **more: Callable[..., Any]) -> Built:
    """The class's own local and classic paths on the built model or a stand-in (``cls``: the class whose methods
    run, by default the object's own); ``head``: the head each call loads, by default ``obj.lm_head``."""
    own = cls or type(obj)
    return Built(
        obj,
        obj.lm_head if head is None else head,
        getattr(obj, "draft_id_to_target_id", None),
        {
            "get_top_tokens": lambda h: own.get_top_tokens(obj, h),
            "compute_logits": lambda h: own.compute_logits(obj, h).argmax(dim=-1),
            **more,
        },
    )


def _built_causal(module: str, name: str, config: dict[str, object], registered: bool = True) -> Callable[[], Built]:
    """The class built from ``config`` (by its registry architecture, or directly where it is not registered)."""

    def build() -> Built:
        cls = model_class(module, name)
        model = build_model(config, model_class=None if registered else cls)
        if type(model) is not cls:
            raise RuntimeError(f"built {type(model).__name__}, not {name}")
        return standard(model, cls)

    return build


def lm_head(vocab: int, org: int | None = None) -> Any:
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return ParallelLMHead(vocab, HIDDEN, org_num_embeddings=org, params_dtype=torch.float32)


def logits_processor(vocab: int, **kwargs: Any) -> Any:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    return LogitsProcessor(vocab, **kwargs)


def stand_in(name: str, methods: dict[str, Callable[..., Any]], **attrs: Any) -> Any:
    """An object of a fresh class that holds ``attrs`` and runs vLLM's ``methods`` (the class's own functions)."""
    obj = type(f"{name}StandIn", (), dict(methods))()
    obj.__dict__.update(attrs)
    return obj


def source_methods(module: str, cls: str, names: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """``cls``'s methods compiled from the installed file itself, for a module that cannot be imported on the CPU:
    vLLM's real method bodies run (nothing is copied into this repository)."""
    path = vllm_root().joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_bytes(), str(path))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    fns = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name in names]
    namespace: dict[str, Any] = {"torch": torch}
    flags = annotations.compiler_flag  # the __future__ feature this module imports: annotations stay strings
    exec(compile(ast.Module(body=fns, type_ignores=[]), str(path), "exec", flags=flags, dont_inherit=True), namespace)
    return {n: namespace[n] for n in names}


def class_methods(module: str, cls: str, names: tuple[str, ...], importable: bool) -> dict[str, Callable[..., Any]]:
    if importable:
        klass = model_class(module, cls)
        return {n: getattr(klass, n) for n in names}
    return source_methods(module, cls, names)


def _reproduced(module: str, cls: str, vocab: int, target: int | None = None, **processor: Any) -> Callable[[], Built]:
    """A draft head as its constructor makes it: ``ParallelLMHead(draft_vocab_size)``, ``LogitsProcessor(
    draft_vocab_size, **processor)`` and, where the draft vocabulary is smaller than the ``target``'s,
    ``draft_id_to_target_id``; the class's own ``get_top_tokens`` and ``compute_logits`` run on it."""

    def build() -> Built:
        klass = model_class(module, cls)
        d2t = None
        if target is not None:
            d2t = torch.nn.Parameter(torch.zeros(vocab, dtype=torch.long), requires_grad=False)
        obj = stand_in(
            cls,
            {"get_top_tokens": klass.get_top_tokens, "compute_logits": klass.compute_logits},
            config=SimpleNamespace(draft_vocab_size=vocab, vocab_size=target or vocab),
            lm_head=lm_head(vocab),
            logits_processor=logits_processor(vocab, **processor),
            draft_id_to_target_id=d2t,
        )
        return standard(obj)

    return build


def causal(
    tail: str, cls: str, config: dict[str, object], how: str, *, registered: bool = True, **pin: object
) -> Subject:
    """A causal LM of ``MODELS.tail`` built from ``config`` (``pin``: what its head has besides the defaults)."""
    module = f"{MODELS}.{tail}"
    return Subject(cls, module, head_pin(1000, **pin), _built_causal(module, cls, config, registered), how)


def reproduced(
    tail: str, cls: str, vocab: int, target: int | None, how: str, since: str = "", **processor: Any
) -> Subject:
    """A class of ``MODELS.tail`` (or of the module ``tail`` names in full, ``vllm.models...``) whose head is
    reproduced (:func:`_reproduced`); ``how``: why it is not built."""
    module = tail if tail.startswith("vllm.") else f"{MODELS}.{tail}"
    d2t = {} if target is None else {"d2t": "eagle3", "target_extra": target - vocab}
    build = _reproduced(module, cls, vocab, target, **processor)
    return Subject(cls, module, head_pin(vocab, **d2t, **processor), build, NO_CPU_BUILD + how, since=since)
