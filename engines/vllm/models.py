"""vLLM's model classes under test: each class that exposes ``get_top_tokens`` (or a local top-k), on its own head.

:func:`discover` finds the classes in the installed wheel (read with ``ast``, then confirmed by importing them in a
child process: some platform modules abort the interpreter that imports them on a CPU).  Each class is an
implementation under the suite's contract, named ``engines.vllm.models:CLASS.PATH`` (module ``__getattr__``):

- ``CLASS.get_top_tokens``: the class's local argmax (``use_local_argmax_reduction``);
- ``CLASS.compute_logits``: its classic path, ``compute_logits(h).argmax(-1)``;
- ``CLASS.get_top_k_tokens``: its local top-k (``compute_candidates``), where it has one.

``fn.start`` builds the class once per rank process for the group's tp (after :func:`start_vllm`), from a tiny
config on the CPU, offline; ``fn.head`` pins every case to the head that build really has.  A class that cannot be
built on the CPU is reproduced: the head pieces its constructor makes (``ParallelLMHead``, ``LogitsProcessor``, its
masking), held by a stand-in that carries exactly what the method reads, and the class's own method run on it
unbound.  ``SUBJECTS[name].how`` says which.  Each call copies this rank's rows into the class's head and calls the
class's method; nothing is validated or fixed on vLLM's behalf.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from engines.vllm.layer import INSTALL_HINT, start_vllm

METHODS = ("get_top_tokens", "get_top_k_tokens")
PATHS = ("get_top_tokens", "compute_logits", "get_top_k_tokens")
HIDDEN = 64


@dataclass(frozen=True)
class ModelClass:
    """A model class of the installed vLLM and what it exposes."""

    name: str
    module: str
    methods: tuple[str, ...]  # of METHODS; empty: a draft class without get_top_tokens ("no method")
    found: str  # why discovery picked it
    architectures: tuple[str, ...] = ()  # registry architectures that resolve to it
    draft: bool = False  # in vLLM's speculative-decoding registry
    top_k_via: str | None = None  # the method that calls get_top_k_tokens (e.g. compute_candidates)
    confirmed: str = "not checked"  # "yes" (import + hasattr agree), "no method", or why it could not be checked


# ---------------------------------------------------------------------------------------------------- discovery


@dataclass
class _Class:
    name: str
    module: str
    bases: tuple[str, ...]
    defines: tuple[str, ...]  # model-level METHODS it defines (hidden states in, ids out)
    calls: dict[str, str] = field(default_factory=dict)  # METHOD -> the method of this class that calls it


def vllm_root() -> Path:
    """The installed ``vllm`` package's directory (found without importing it)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(INSTALL_HINT)
    return Path(next(iter(spec.submodule_search_locations)))


def _module_name(root: Path, path: Path) -> str:
    parts = ("vllm", *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _last(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _model_level(fn: ast.FunctionDef) -> bool:
    """Takes the hidden states alone (``LogitsProcessor``'s and helpers' versions also take the head)."""
    positional = [a for a in fn.args.posonlyargs + fn.args.args if a.arg != "self"]
    return len(positional) - len(fn.args.defaults) <= 1


def _scan_file(root: Path, path: Path) -> tuple[list[_Class], dict[str, set[str]]]:
    tree = ast.parse(path.read_bytes(), str(path))
    module = _module_name(root, path)
    classes, aliases = [], {}

    def top(stmts: list[ast.stmt]) -> None:  # module level, through if/try blocks (TYPE_CHECKING, platforms)
        for node in stmts:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if (target := _last(node.value)) is not None:
                    aliases.setdefault(node.targets[0].id, set()).add(target)
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.asname and a.asname != a.name:
                        aliases.setdefault(a.asname, set()).add(a.name)
            elif isinstance(node, ast.ClassDef):
                classes.append(_class(node))
            elif isinstance(node, (ast.If, ast.Try)):
                top(node.body + node.orelse + getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    top(handler.body)

    def _class(node: ast.ClassDef) -> _Class:
        fns = [f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        defines = tuple(f.name for f in fns if f.name in METHODS and _model_level(f))
        calls = {}
        for f in fns:
            for call in ast.walk(f):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in METHODS:
                    if f.name not in METHODS:
                        calls.setdefault(call.func.attr, f.name)
        bases = tuple(b for b in map(_last, node.bases) if b)
        return _Class(node.name, module, bases, defines, calls)

    top(tree.body)
    return classes, aliases


def _registry(root: Path) -> tuple[dict[str, list[str]], dict[tuple[str, str], bool]]:
    """vLLM's model registry: class name -> architectures, and (module, class) -> whether it is a draft class."""
    tree = ast.parse((root / "model_executor/models/registry.py").read_bytes())
    archs: dict[str, list[str]] = {}
    targets: dict[tuple[str, str], bool] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)):
            continue
        name = _last(node.targets[0]) or ""
        for key, value in zip(node.value.keys, node.value.values, strict=False):
            if not (isinstance(key, ast.Constant) and isinstance(value, ast.Tuple) and len(value.elts) == 2):
                continue
            module, cls = (getattr(e, "value", None) for e in value.elts)
            if not (isinstance(module, str) and isinstance(cls, str)):
                continue
            module = module if module.startswith("vllm.") else f"vllm.model_executor.models.{module}"
            archs.setdefault(cls, []).append(key.value)
            draft = name == "_SPECULATIVE_DECODING_MODELS"
            targets[(module, cls)] = targets.get((module, cls), False) or draft
    return archs, targets


def _why(classes: list[_Class], aliases: dict[str, dict[str, set[str]]]) -> dict[int, str]:
    """Why each class exposes a method: it defines one, inherits ``LocalArgmaxMixin``, or (transitively, by
    base-class name, through module-level aliases) inherits such a class."""
    why: dict[int, str] = {}
    for i, c in enumerate(classes):
        if c.defines:
            why[i] = f"defines {', '.join(c.defines)}"
        elif "LocalArgmaxMixin" in c.bases:
            why[i] = "inherits LocalArgmaxMixin"
    providers = {classes[i].name for i in why} | {"LocalArgmaxMixin"}
    grew = True
    while grew:
        grew = False
        for i, c in enumerate(classes):
            if i in why:
                continue
            for base in c.bases:
                hit = providers & ({base} | aliases[c.module].get(base, set()))
                if hit:
                    why[i], grew = f"inherits {min(hit)}", True
                    providers.add(c.name)
                    break
    return why


@cache
def scan() -> tuple[ModelClass, ...]:
    """The AST half of :func:`discover`: candidates, unconfirmed.  Only files that name a method, the mixin, a
    draft class or a class found so far are parsed (parsing all of them takes about 20 s)."""
    root = vllm_root()
    archs, registered = _registry(root)
    texts = {path: path.read_text(errors="replace") for path in sorted(root.rglob("*.py"))}
    words = {*METHODS, "LocalArgmaxMixin", *(cls for (_, cls), draft in registered.items() if draft)}
    parsed: dict[Path, tuple[list[_Class], dict[str, set[str]]]] = {}
    while True:
        new = [path for path, text in texts.items() if path not in parsed and any(w in text for w in words)]
        if not new:
            break
        for path in new:
            try:
                parsed[path] = _scan_file(root, path)
            except SyntaxError:
                parsed[path] = ([], {})
        classes = [c for found, _ in parsed.values() for c in found]
        aliases = {_module_name(root, path): names for path, (_, names) in parsed.items()}
        why = _why(classes, aliases)
        words |= {classes[i].name for i in why}

    def methods(i: int) -> tuple[str, ...]:
        found = set(classes[i].defines) if classes[i].defines else {"get_top_tokens"} if i in why else set()
        return tuple(m for m in METHODS if m in found or m in classes[i].calls)

    def draft(c: _Class) -> bool:
        return any(
            d and c.name == cls and (c.module + ".").startswith(mod + ".") for (mod, cls), d in registered.items()
        )

    out = []
    for i, c in enumerate(classes):
        callers = {m: f for m, f in c.calls.items() if m == "get_top_k_tokens"}
        if i not in why and not callers and not draft(c):
            continue
        reason = why.get(i) or (
            f"calls get_top_k_tokens in {callers['get_top_k_tokens']}" if callers else "draft class without a method"
        )
        if i in why and callers:
            reason += f"; calls get_top_k_tokens in {callers['get_top_k_tokens']}"
        out.append(
            ModelClass(
                c.name,
                c.module,
                methods(i),
                reason,
                tuple(archs.get(c.name, ())),
                draft(c),
                callers.get("get_top_k_tokens"),
            )
        )
    return tuple(out)


def discover(*, confirm: bool = True) -> list[ModelClass]:
    """Every class of the installed vLLM that exposes ``get_top_tokens``/``get_top_k_tokens`` (defined, from
    ``LocalArgmaxMixin``, inherited by base-class name, or called in a method), and every draft class of vLLM's
    speculative-decoding registry that lacks them ("no method").  ``confirm`` imports each candidate's module in a
    child process and checks ``hasattr(cls, ...)``."""
    found = list(scan())
    if not confirm:
        return found
    checks = {
        f"{m.module}:{m.name}": tuple(m.top_k_via if x == "get_top_k_tokens" and m.top_k_via else x for x in METHODS)
        for m in found
    }
    verdicts = _confirm(checks)
    return [replace(m, confirmed=verdicts.get(f"{m.module}:{m.name}", "not checked")) for m in found]


def _confirm(checks: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Import each ``module:class`` in a child and check its methods; a module that kills the child is named, and a
    fresh child goes on after it.  ROCm modules come last: importing them aborts a CPU-only process."""
    verdicts: dict[str, str] = {}
    todo = sorted(checks, key=lambda t: ".amd." in t)
    while todo:
        lines = "\n".join(f"{t} {','.join(checks[t])}" for t in todo)
        proc = subprocess.run([sys.executable, "-c", _CONFIRM], input=lines, capture_output=True, text=True)
        started = None
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                started = entry.pop("importing", started)
                verdicts.update(entry)
        if started is not None and started not in verdicts:
            verdicts[started] = f"importing its module ended the process (exit {proc.returncode})"
        rest = [t for t in todo if t not in verdicts]
        if len(rest) == len(todo):
            break
        todo = rest
    return verdicts


_CONFIRM = """
import importlib, json, sys
for line in sys.stdin.read().splitlines():
    target, methods = line.split()
    module, name = target.split(":")
    print(json.dumps({"importing": target}), flush=True)
    try:
        cls = getattr(importlib.import_module(module), name)
        has = [m for m in methods.split(",") if hasattr(cls, m)]
        verdict = "yes: " + ", ".join(has) if has else "no method"
    except BaseException as exc:
        verdict = f"import failed: {type(exc).__name__}: {str(exc)[:200]}"
    print(json.dumps({target: verdict}), flush=True)
"""


# ---------------------------------------------------------------------------------------------------- subjects


@dataclass(frozen=True)
class Subject:
    """One class (in one configuration) as an implementation under test."""

    cls: str
    module: str
    head: dict[str, object]  # properties.cases.Case overrides: the head this build really has
    build: Callable[[], Any]  # -> _Built, in the rank process, after start_vllm
    how: str  # "built" or "head reproduced from the constructor: <why>"
    paths: tuple[str, ...] = ("get_top_tokens", "compute_logits")
    values: str = "logits"  # what its top-k values are: "logits", or "log_probs" (return_log_probs=True)


@dataclass
class _Built:
    obj: Any  # the model, or the stand-in the class's methods run on
    head: Any  # the ParallelLMHead (or tied embedding) whose rows each call loads
    d2t: torch.nn.Parameter | None = None
    call: dict[str, Callable[..., Any]] = field(default_factory=dict)  # path -> fn(hidden[, k])
    reset: Callable[[], None] | None = None  # what loading the weights resets in the class (caches)


def _head_pin(vocab: int, **extra: object) -> dict[str, object]:
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


def _llama(vocab: int, **extra: object) -> dict[str, object]:
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


def _qwen3(vocab: int, tied: bool) -> dict[str, object]:
    return _llama(vocab, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16, tie_word_embeddings=tied)


def _model_config(directory: str, config: dict[str, object]) -> Any:
    from vllm.config import ModelConfig

    Path(directory, "config.json").write_text(json.dumps(config))
    return ModelConfig(model=directory, skip_tokenizer_init=True, dtype="float32", enforce_eager=True)


def _build_model(
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


def _class(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def _standard(obj: Any, cls: Any = None, head: Any = None, **more: Callable[..., Any]) -> _Built:
    """The class's own local and classic paths on the built model or a stand-in (``cls``: the class whose methods
    run, by default the object's own); ``head``: the head each call loads, by default ``obj.lm_head``."""
    own = cls or type(obj)
    return _Built(
        obj,
        obj.lm_head if head is None else head,
        getattr(obj, "draft_id_to_target_id", None),
        {
            "get_top_tokens": lambda h: own.get_top_tokens(obj, h),
            "compute_logits": lambda h: own.compute_logits(obj, h).argmax(dim=-1),
            **more,
        },
    )


def _built_causal(module: str, name: str, config: dict[str, object], registered: bool = True) -> Callable[[], _Built]:
    """The class built from ``config`` (by its registry architecture, or directly where it is not registered)."""

    def build() -> _Built:
        cls = _class(module, name)
        model = _build_model(config, model_class=None if registered else cls)
        if type(model) is not cls:
            raise RuntimeError(f"built {type(model).__name__}, not {name}")
        return _standard(model, cls)

    return build


def _build_eagle3() -> _Built:
    from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM

    draft = _llama(EAGLE3_TARGET, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=EAGLE3_DRAFT)
    return _standard(_build_model(_llama(EAGLE3_TARGET), draft), Eagle3LlamaForCausalLM)


def _lm_head(vocab: int, org: int | None = None) -> Any:
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return ParallelLMHead(vocab, HIDDEN, org_num_embeddings=org, params_dtype=torch.float32)


def _processor(vocab: int, **kwargs: Any) -> Any:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    return LogitsProcessor(vocab, **kwargs)


def _stand_in(name: str, methods: dict[str, Callable[..., Any]], **attrs: Any) -> Any:
    """An object of a fresh class that holds ``attrs`` and runs vLLM's ``methods`` (the class's own functions)."""
    obj = type(f"{name}StandIn", (), dict(methods))()
    obj.__dict__.update(attrs)
    return obj


def _source_methods(module: str, cls: str, names: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
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


def _methods(module: str, cls: str, names: tuple[str, ...], importable: bool) -> dict[str, Callable[..., Any]]:
    if importable:
        klass = _class(module, cls)
        return {n: getattr(klass, n) for n in names}
    return _source_methods(module, cls, names)


def _mtp_predictor(
    module: str, outer: str, inner: str, *, importable: bool, layers: str, pre_head: bool = False
) -> Callable[[], _Built]:
    """DeepSeek-style MTP: ``OUTER.get_top_tokens`` -> ``self.model.get_top_tokens(h, step)`` ->
    ``logits_processor.get_top_tokens(layer.shared_head.head, h)``, the head the proposer shares from the target."""

    def build() -> _Built:
        head = _lm_head(MTP_VOCAB)
        layer = SimpleNamespace(shared_head=SimpleNamespace(head=head))
        inner_methods = _methods(module, inner, ("get_top_tokens", "compute_logits"), importable)
        if pre_head:  # the hidden-state transform before the head (hc_head + RMSNorm): the case's hidden is its output
            inner_methods["_pre_head"] = lambda self, layer, h: h
        holder = {"layers": {"1": layer}} if layers == "layers" else {"_mtp_layers": [layer]}
        model = _stand_in(
            inner,
            inner_methods,
            mtp_start_layer_idx=1,
            num_mtp_layers=1,
            logits_processor=_processor(MTP_VOCAB),
            **holder,
        )
        outer_methods = _methods(module, outer, ("get_top_tokens", "compute_logits"), importable)
        obj = _stand_in(outer, outer_methods, model=model)
        return _standard(obj, head=head)

    return build


def _build_qwen3_5_mtp() -> _Built:
    """``Qwen3_5MTP`` defines no ``get_top_tokens``: it is ``LocalArgmaxMixin``'s, run on the constructor's pieces."""
    from vllm.model_executor.models.interfaces import LocalArgmaxMixin

    qwen_methods = {
        "get_top_tokens": LocalArgmaxMixin.get_top_tokens,
        **_source_methods("vllm.model_executor.models.qwen3_5_mtp", "Qwen3_5MTP", ("compute_logits",)),
    }
    obj = _stand_in("Qwen3_5MTP", qwen_methods, lm_head=_lm_head(MTP_VOCAB), logits_processor=_processor(MTP_VOCAB))
    return _standard(obj)


def _build_gemma4_mtp(centroids: int | None, top_k: int, ordered: bool) -> Callable[[], _Built]:
    """``Gemma4MTP``'s head: tied ``ParallelLMHead(vocab)``, ``LogitsProcessor(vocab, soft_cap=final_logit_
    softcapping)``, and (``use_ordered_embeddings``) its ``Gemma4MTPMaskedEmbedder`` with seeded centroids and
    token ordering (the same on every rank: they are replicated)."""

    def build() -> _Built:
        from vllm.model_executor.models.gemma4_mtp import Gemma4MTP, Gemma4MTPMaskedEmbedder

        masked = None
        if centroids is not None:
            masked = Gemma4MTPMaskedEmbedder(HIDDEN, GEMMA4_VOCAB, centroids, top_k)
            g = torch.Generator().manual_seed(0)
            masked.centroids.weight.data.copy_(torch.randn(centroids, HIDDEN, generator=g))
            order = torch.randperm(GEMMA4_VOCAB, generator=g) if ordered else torch.arange(GEMMA4_VOCAB)
            masked.token_ordering.copy_(order)
        methods = {n: getattr(Gemma4MTP, n) for n in ("get_top_tokens", "compute_logits", "_get_full_lm_head_weight")}
        obj = _stand_in(
            "Gemma4MTP",
            methods,
            lm_head=_lm_head(GEMMA4_VOCAB),
            masked_embedding=masked,
            logits_processor=_processor(GEMMA4_VOCAB, soft_cap=GEMMA4_SOFT_CAP),
            _stable_full_lm_head_weight=None,
            _suppress_idx=None,
        )

        def reset() -> None:  # Gemma4MTP.load_weights drops the gathered head it caches
            obj._stable_full_lm_head_weight = None

        return replace(_standard(obj), reset=reset)

    return build


def _build_inkling(module: str, importable: bool) -> _Built:
    """``InklingMTP``: the target's ``ParallelLMHead(padded_vocab_size, org_num_embeddings=padded_vocab_size)``
    (attached by the proposer) and ``LogitsProcessor(padded_vocab_size, org_vocab_size=vocab_size, soft_cap=...)``."""
    methods = _methods(module, "InklingMTP", ("get_top_tokens", "compute_logits"), importable)
    config = SimpleNamespace(logits_mup_width_multiplier=None)
    obj = _stand_in(
        "InklingMTP",
        methods,
        config=config,
        lm_head=_lm_head(INKLING_PADDED, INKLING_PADDED),
        logits_processor=_processor(INKLING_PADDED, org_vocab_size=INKLING_VOCAB),
        _logits_zero=None,
    )
    return _standard(obj)


def _reproduced(module: str, cls: str, vocab: int, target: int | None = None, **processor: Any) -> Callable[[], _Built]:
    """A draft head as its constructor makes it: ``ParallelLMHead(draft_vocab_size)``, ``LogitsProcessor(
    draft_vocab_size, **processor)`` and, where the draft vocabulary is smaller than the ``target``'s,
    ``draft_id_to_target_id``; the class's own ``get_top_tokens`` and ``compute_logits`` run on it."""

    def build() -> _Built:
        klass = _class(module, cls)
        d2t = None
        if target is not None:
            d2t = torch.nn.Parameter(torch.zeros(vocab, dtype=torch.long), requires_grad=False)
        obj = _stand_in(
            cls,
            {"get_top_tokens": klass.get_top_tokens, "compute_logits": klass.compute_logits},
            config=SimpleNamespace(draft_vocab_size=vocab, vocab_size=target or vocab),
            lm_head=_lm_head(vocab),
            logits_processor=_processor(vocab, **processor),
            draft_id_to_target_id=d2t,
        )
        return _standard(obj)

    return build


def _build_candidates(module: str, cls: str, holder: str, attr: str, processor: dict[str, Any]) -> Callable[[], _Built]:
    """DFlash-style drafts: ``compute_candidates`` = ``candidate_logits_processor.get_top_k_tokens(self.lm_head, h,
    <k from the draft config>)``; the local argmax and classic paths are ``Qwen3ForCausalLM``'s (inherited)."""

    def build() -> _Built:
        klass = _class(module, cls)
        inner = SimpleNamespace(**{holder: SimpleNamespace(**{attr: 1})})
        methods = {n: getattr(klass, n) for n in ("compute_candidates", "get_top_tokens", "compute_logits")}
        obj = _stand_in(
            cls,
            methods,
            lm_head=_lm_head(DFLASH_VOCAB),
            model=inner,
            logits_processor=_processor(DFLASH_VOCAB),
            candidate_logits_processor=_processor(**processor),
        )

        def top_k(h: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
            setattr(getattr(inner, holder), attr, k)  # the draft config's candidate count
            return obj.compute_candidates(h)

        return _standard(obj, get_top_k_tokens=top_k)

    return build


EAGLE3_DRAFT, EAGLE3_TARGET = 1000, 1500
MTP_VOCAB = GEMMA4_VOCAB = DFLASH_VOCAB = 1000
GEMMA4_SOFT_CAP = 30.0  # Gemma's final_logit_softcapping
INKLING_VOCAB, INKLING_PADDED = 1000, 1024
DFLASH2_SCALE, DFLASH2_SOFT_CAP = 0.5, 30.0  # dflash_config output_multiplier and final_logit_softcapping

_NO_CPU_BUILD = "head reproduced from the constructor: "
_V32 = "vllm.models.deepseek_v32.nvidia.mtp"
_V4_AMD = "vllm.models.deepseek_v4.amd.mtp"
_GLM5 = "vllm.models.glm5next.common.mtp"
_INKLING_NV, _INKLING_AMD = "vllm.models.inkling.nvidia.mtp", "vllm.models.inkling.amd.mtp"
_MODELS = "vllm.model_executor.models"

SUBJECTS: dict[str, Subject] = {
    "LlamaForCausalLM": Subject(
        "LlamaForCausalLM",
        f"{_MODELS}.llama",
        _head_pin(1000),
        _built_causal(f"{_MODELS}.llama", "LlamaForCausalLM", _llama(1000)),
        "built",
    ),
    "Qwen3ForCausalLM[untied]": Subject(
        "Qwen3ForCausalLM",
        f"{_MODELS}.qwen3",
        _head_pin(1000),
        _built_causal(f"{_MODELS}.qwen3", "Qwen3ForCausalLM", _qwen3(1000, tied=False)),
        "built",
    ),
    "Qwen3ForCausalLM[tied]": Subject(
        "Qwen3ForCausalLM",
        f"{_MODELS}.qwen3",
        _head_pin(1000),
        _built_causal(f"{_MODELS}.qwen3", "Qwen3ForCausalLM", _qwen3(1000, tied=True)),
        "built (tie_word_embeddings: the head is the input embedding)",
    ),
    "Eagle3LlamaForCausalLM": Subject(
        "Eagle3LlamaForCausalLM",
        f"{_MODELS}.llama_eagle3",
        _head_pin(EAGLE3_DRAFT, d2t="eagle3", target_extra=EAGLE3_TARGET - EAGLE3_DRAFT),
        _build_eagle3,
        "built (EAGLE3 draft over a LlamaForCausalLM target, SpeculativeConfig method eagle3)",
    ),
    "Eagle3DeepseekV2ForCausalLM": Subject(
        "Eagle3DeepseekV2ForCausalLM",
        f"{_MODELS}.deepseek_eagle3",
        _head_pin(EAGLE3_DRAFT, d2t="eagle3", target_extra=EAGLE3_TARGET - EAGLE3_DRAFT),
        _reproduced(f"{_MODELS}.deepseek_eagle3", "Eagle3DeepseekV2ForCausalLM", EAGLE3_DRAFT, EAGLE3_TARGET),
        _NO_CPU_BUILD + "its DeepseekV2 (MLA) layers need a DeepSeek target and MLA attention backends",
    ),
    "Qwen3_5MTP": Subject(
        "Qwen3_5MTP",
        f"{_MODELS}.qwen3_5_mtp",
        _head_pin(MTP_VOCAB),
        _build_qwen3_5_mtp,
        _NO_CPU_BUILD + "its module does not import here (torchvision is absent: the CPU install removes it); "
        "get_top_tokens is LocalArgmaxMixin's, compute_logits compiled from the installed file",
    ),
    "Gemma4MTP": Subject(
        "Gemma4MTP",
        f"{_MODELS}.gemma4_mtp",
        _head_pin(GEMMA4_VOCAB, soft_cap=GEMMA4_SOFT_CAP),
        _build_gemma4_mtp(8, 2, ordered=True),
        _NO_CPU_BUILD + "its predictor needs a Gemma4 target's KV sharing; use_ordered_embeddings with 8 centroids "
        "of 125 tokens, the top 2 selected (seeded centroids and token ordering)",
    ),
    "Gemma4MTP[all_centroids]": Subject(
        "Gemma4MTP",
        f"{_MODELS}.gemma4_mtp",
        _head_pin(GEMMA4_VOCAB, soft_cap=GEMMA4_SOFT_CAP),
        _build_gemma4_mtp(8, 8, ordered=False),
        _NO_CPU_BUILD + "as Gemma4MTP, but every centroid selected and the identity token ordering",
    ),
    "Gemma4MTP[dense]": Subject(
        "Gemma4MTP",
        f"{_MODELS}.gemma4_mtp",
        _head_pin(GEMMA4_VOCAB, soft_cap=GEMMA4_SOFT_CAP),
        _build_gemma4_mtp(None, 0, ordered=False),
        _NO_CPU_BUILD + "as Gemma4MTP, without use_ordered_embeddings (no masked embedder)",
    ),
    "DeepseekV32MTP": Subject(
        "DeepseekV32MTP",
        _V32,
        _head_pin(MTP_VOCAB),
        _mtp_predictor(_V32, "DeepseekV32MTP", "DeepseekV32MultiTokenPredictor", importable=True, layers="layers"),
        _NO_CPU_BUILD + "its MLA/sparse-indexer decoder layer and fused MoE need CUDA kernels (the NVIDIA module; "
        "the AMD one has no get_top_tokens)",
    ),
    "DeepSeekV4MTP": Subject(
        "DeepSeekV4MTP",
        _V4_AMD,
        _head_pin(MTP_VOCAB),
        _mtp_predictor(
            _V4_AMD, "DeepSeekV4MTP", "DeepSeekV4MultiTokenPredictor", importable=False, layers="layers", pre_head=True
        ),
        _NO_CPU_BUILD + "only the AMD module defines get_top_tokens, and importing it aborts the process on a CPU "
        "(ROCm ops): its methods are compiled from the installed file; the hc_head + RMSNorm before the head is "
        "left out (the case's hidden states are the head's input)",
    ),
    "Glm5NextMTP": Subject(
        "Glm5NextMTP",
        _GLM5,
        _head_pin(MTP_VOCAB),
        _mtp_predictor(_GLM5, "Glm5NextMTP", "Glm5NextMultiTokenPredictor", importable=False, layers="_mtp_layers"),
        _NO_CPU_BUILD + "its module does not import here (torchvision is absent); its methods are compiled from the "
        "installed file",
    ),
    "InklingMTP": Subject(
        "InklingMTP",
        _INKLING_NV,
        _head_pin(INKLING_PADDED, logits_vocab=INKLING_VOCAB),
        lambda: _build_inkling(_INKLING_NV, importable=True),
        _NO_CPU_BUILD + "it holds no head of its own (the proposer attaches the target's), and its predictor needs "
        "the Inkling target (NVIDIA module)",
    ),
    "InklingMTP[amd]": Subject(
        "InklingMTP",
        _INKLING_AMD,
        _head_pin(INKLING_PADDED, logits_vocab=INKLING_VOCAB),
        lambda: _build_inkling(_INKLING_AMD, importable=False),
        _NO_CPU_BUILD + "as InklingMTP; importing the AMD module aborts the process on a CPU, so its methods are "
        "compiled from the installed file",
    ),
    "DFlash2Qwen3ForCausalLM": Subject(
        "DFlash2Qwen3ForCausalLM",
        f"{_MODELS}.qwen3_dflash2",
        _head_pin(DFLASH_VOCAB, scale=DFLASH2_SCALE, soft_cap=DFLASH2_SOFT_CAP),
        _build_candidates(
            f"{_MODELS}.qwen3_dflash2",
            "DFlash2Qwen3ForCausalLM",
            "candidate_selector",
            "top_k",
            {"vocab": DFLASH_VOCAB, "scale": DFLASH2_SCALE, "soft_cap": DFLASH2_SOFT_CAP},
        ),
        _NO_CPU_BUILD + "its grouped-conv DFlash layers need a Qwen3 target's hidden states and attention metadata; "
        "output_multiplier 0.5 and final_logit_softcapping 30 (top-k path), the argmax paths Qwen3ForCausalLM's",
        ("get_top_k_tokens",),
    ),
    "LiLiCorrForCausalLM": Subject(
        "LiLiCorrForCausalLM",
        f"{_MODELS}.lilicorr",
        _head_pin(DFLASH_VOCAB),
        _build_candidates(
            f"{_MODELS}.lilicorr", "LiLiCorrForCausalLM", "lilicorr", "candidate_topk", {"vocab": DFLASH_VOCAB}
        ),
        _NO_CPU_BUILD + "its lattice attention needs a Qwen3 target's hidden states and attention metadata; "
        "compute_candidates asks for log-probabilities",
        ("get_top_k_tokens",),
        "log_probs",
    ),
}

TELEFLM_MUP = {"use_mup": True, "mup_scale_factor": 2.0, "output_mult": 1.0}  # scale = output_mult / mup_scale_factor
TELEFLM_SCALE = 0.5

# Causal LMs built from a tiny config: subject -> (module, class, config, in the registry, how, head pin extras)
_CAUSAL: dict[str, tuple[str, str, dict[str, object], bool, str, dict[str, object]]] = {
    "MistralForCausalLM": (
        "mistral",
        "MistralForCausalLM",
        _llama(1000, architectures=["MistralForCausalLM"], model_type="mistral", head_dim=16),
        True,
        "built (transformers' MistralConfig)",
        {},
    ),
    "Phi3ForCausalLM": (
        "phi3",
        "Phi3ForCausalLM",
        _llama(1000, architectures=["Phi3ForCausalLM"], model_type="phi3"),
        True,
        "built (transformers' Phi3Config)",
        {},
    ),
    "Ernie4_5ForCausalLM": (
        "ernie45",
        "Ernie4_5ForCausalLM",
        _llama(1000, architectures=["Ernie4_5ForCausalLM"], model_type="ernie4_5", head_dim=16),
        True,
        "built (transformers' Ernie4_5Config)",
        {},
    ),
    "TeleChat2ForCausalLM": (
        "telechat2",
        "TeleChat2ForCausalLM",
        _llama(
            1000,
            architectures=["TeleChat2ForCausalLM"],
            n_layer=1,
            n_head=4,
            ffn_hidden_size=128,
            layer_norm_epsilon=1e-6,
        ),
        True,
        "built (its config is remote code: a LlamaConfig carrying TeleChat2's field names)",
        {},
    ),
    "TeleFLMForCausalLM": (
        "teleflm",
        "TeleFLMForCausalLM",
        _llama(1000, architectures=["TeleFLMForCausalLM"], use_mup=False),
        True,
        "built (its config is remote code: a LlamaConfig with use_mup false)",
        {},
    ),
    "TeleFLMForCausalLM[mup]": (
        "teleflm",
        "TeleFLMForCausalLM",
        _llama(1000, architectures=["TeleFLMForCausalLM"], **TELEFLM_MUP),
        True,
        "built (a LlamaConfig with use_mup: LogitsProcessor(scale=output_mult / mup_scale_factor = 0.5))",
        {"scale": TELEFLM_SCALE},
    ),
    "MossQwen3ForCausalLM": (
        "moss_audio",
        "MossQwen3ForCausalLM",
        _qwen3(1000, tied=False),
        False,
        "built directly (MossAudio's language model, not in the registry; a Qwen3Config)",
        {},
    ),
}

# Drafts whose head is reproduced: subject -> (module, class, draft vocab, target vocab or None, processor, how)
_REPRODUCED: dict[str, tuple[str, str, int, int | None, dict[str, Any], str]] = {
    "EagleLlamaForCausalLM": (
        "llama_eagle",
        "EagleLlamaForCausalLM",
        1000,
        None,
        {},
        "it makes no lm_head (the proposer shares the target's ParallelLMHead(vocab)); LogitsProcessor(vocab_size)",
    ),
    "EagleMistralForCausalLM": (
        "mistral_eagle",
        "EagleMistralForCausalLM",
        1000,
        None,
        {},
        "it makes no lm_head (the proposer shares the target's ParallelLMHead(vocab)); LogitsProcessor(vocab_size)",
    ),
    "EagleLlama4ForCausalLM": (
        "llama4_eagle",
        "EagleLlama4ForCausalLM",
        1000,
        None,
        {},
        "its LlamaModel draft needs a Llama4 target; ParallelLMHead(draft_vocab_size) and LogitsProcessor(vocab_size), "
        "both 1000 here, no draft_id_to_target_id",
    ),
    "Llama4ForCausalLM": (
        "llama4",
        "Llama4ForCausalLM",
        1000,
        None,
        {},
        "its MoE decoder layers were not built on the CPU here; it runs LlamaForCausalLM's constructor: "
        "ParallelLMHead(vocab_size), LogitsProcessor(vocab_size, scale=logit_scale), logit_scale 1",
    ),
    "Eagle3Qwen3ForCausalLM": (
        "qwen3_eagle3",
        "Eagle3Qwen3ForCausalLM",
        EAGLE3_DRAFT,
        EAGLE3_TARGET,
        {},
        "ParallelLMHead(draft_vocab_size), LogitsProcessor(draft_vocab_size) and draft_id_to_target_id "
        "(draft 1000 of a 1500 target)",
    ),
    "DFlashQwen3ForCausalLM": (
        "qwen3_dflash",
        "DFlashQwen3ForCausalLM",
        EAGLE3_DRAFT,
        EAGLE3_TARGET,
        {},
        "its DFlash layers need a Qwen3 target's hidden states; ParallelLMHead(draft_vocab_size), "
        "LogitsProcessor(draft_vocab_size) and draft_id_to_target_id (draft 1000 of a 1500 target)",
    ),
    "Qwen3DSparkForCausalLM": (
        "qwen3_dspark",
        "Qwen3DSparkForCausalLM",
        EAGLE3_DRAFT,
        EAGLE3_TARGET,
        {},
        "its DSpark layers need a Qwen3 target's hidden states; ParallelLMHead(draft_vocab_size), "
        "LogitsProcessor(draft_vocab_size) and draft_id_to_target_id (draft 1000 of a 1500 target)",
    ),
    "Gemma4DSparkForCausalLM": (
        "gemma4_dspark",
        "Gemma4DSparkForCausalLM",
        GEMMA4_VOCAB,
        None,
        {"soft_cap": GEMMA4_SOFT_CAP},
        "its Gemma4 DSpark layers need a Gemma4 target; ParallelLMHead(vocab_size), "
        "LogitsProcessor(vocab_size, soft_cap=final_logit_softcapping), no draft_id_to_target_id",
    ),
}

for _name, (_tail, _cls, _config, _registered, _how, _extra) in _CAUSAL.items():
    SUBJECTS[_name] = Subject(
        _cls,
        f"{_MODELS}.{_tail}",
        _head_pin(1000, **_extra),
        _built_causal(f"{_MODELS}.{_tail}", _cls, _config, _registered),
        _how,
    )
for _name, (_tail, _cls, _vocab, _target, _proc, _how) in _REPRODUCED.items():
    _d2t = {} if _target is None else {"d2t": "eagle3", "target_extra": _target - _vocab}
    SUBJECTS[_name] = Subject(
        _cls,
        f"{_MODELS}.{_tail}",
        _head_pin(_vocab, **_d2t, **_proc),
        _reproduced(f"{_MODELS}.{_tail}", _cls, _vocab, _target, **_proc),
        _NO_CPU_BUILD + _how,
    )

_EMBEDDING = "an embedding/pooling model: inherits get_top_tokens from {} but never decodes, so it is not run"
_UNCHANGED = "its module does not import here ({}); it inherits {}'s get_top_tokens unchanged: covered by {}"

# Discovered classes with a method and no subject of their own: how each is covered, or why it is not run.
COVERAGE: dict[str, str] = {
    "LocalArgmaxMixin": "the mixin itself, not a model: runs in every subject that inherits it (LlamaForCausalLM, ...)",
    "DeepseekV32MultiTokenPredictor": "runs through DeepseekV32MTP.get_top_tokens, which calls it",
    "DeepSeekV4MultiTokenPredictor": "runs through DeepSeekV4MTP.get_top_tokens (AMD module), which calls it",
    "Glm5NextMultiTokenPredictor": "runs through Glm5NextMTP.get_top_tokens, which calls it",
    "Dots3NoteMTP": _UNCHANGED.format("needs a newer flash-attn helper", "DeepseekV32MTP", "DeepseekV32MTP"),
    "Dots3NoteMultiTokenPredictor": _UNCHANGED.format(
        "needs a newer flash-attn helper", "DeepseekV32MultiTokenPredictor", "DeepseekV32MTP"
    ),
    "Qwen3_5MoeMTP": _UNCHANGED.format("torchvision", "Qwen3_5MTP", "Qwen3_5MTP"),
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

_built: dict[str, _Built] = {}  # this rank process's builds, by subject name


def _get(name: str) -> _Built:
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
) -> _Built:
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
    fn.process_bound = True
    fn.start = start
    fn.head = dict(subject.head)
    fn.how = subject.how
    if path == "get_top_k_tokens":
        fn.values = subject.values
    return fn


def specs() -> list[str]:
    """Every ``--impl`` spec this module offers."""
    return [f"{__name__}:{n}.{p}" for n, s in SUBJECTS.items() for p in s.paths]


def __getattr__(attr: str) -> Callable[..., Any]:
    name, _, path = attr.rpartition(".")
    subject = SUBJECTS.get(name)
    if subject is None or path not in subject.paths:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r} (offered: {', '.join(specs())})")
    return _impl(name, path)


# ---------------------------------------------------------------------------------------------------- refusal


def proposer_refuses(name: str) -> str:
    """The ``ValueError`` vLLM's proposer raises when ``use_local_argmax_reduction`` meets a draft class without
    ``get_top_tokens``: ``SpecDecodeBaseProposer._maybe_share_lm_head`` run on a stand-in proposer whose ``model``
    is an (uninitialised) instance of the class and whose target has no head to share."""
    found = [m for m in scan() if m.name == name]
    if not found:
        raise LookupError(f"{name} is not a discovered class")
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    cls = _class(found[0].module, name)
    proposer = SimpleNamespace(
        model=cls.__new__(cls), use_local_argmax_reduction=True, vllm_config=SimpleNamespace(speculative_config=None)
    )
    try:
        SpecDecodeBaseProposer._maybe_share_lm_head(proposer, SimpleNamespace(model=SimpleNamespace()))
    except ValueError as exc:
        return str(exc)
    return f"not refused: {name} passed the proposer's check"
