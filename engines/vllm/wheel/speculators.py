"""Model Runner V2's speculators in the installed wheel: found by reading it, not listed.

Every class under ``vllm/v1/worker/gpu/spec_decode/`` that derives, directly or through another, from
``BaseSpeculator`` is a speculator (:func:`scan`, with ``ast``: no import).  For each, the methods through which
``use_local_argmax_reduction`` is reached are resolved along its bases as Python would: ``sample_draft`` (which
requests take the local path), ``get_draft_top_tokens`` (the local path, with the step index), ``compute_draft_logits``
(the classic path) and ``_validate_local_argmax_reduction`` (the refusal at load).  A speculator that inherits none of
them drafts without a model head (n-gram, suffix) and is no subject.  :func:`refuses` asks a class what it says to a
draft class without ``get_top_tokens``, on the class itself with a stand-in holding the engine's own objects.  The
subjects built from these are in :mod:`engines.vllm.subjects.speculators`.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace

from engines.vllm.wheel.discovery import vllm_root

FOLDER = "v1/worker/gpu/spec_decode"  # Model Runner V2's speculators, from vLLM's package folder
ROOT_CLASS = "BaseSpeculator"
METHODS = ("sample_draft", "get_draft_top_tokens", "compute_draft_logits", "_validate_local_argmax_reduction")


@dataclass(frozen=True)
class Speculator:
    """A speculator class of the installed vLLM, where each of :data:`METHODS` comes from, and whether its propose
    step reaches ``sample_draft``."""

    name: str
    module: str
    bases: tuple[str, ...]
    defines: tuple[str, ...]  # which of METHODS its own body defines
    resolved: tuple[tuple[str, str], ...]  # (method, the class that defines it) along its bases, for METHODS
    picks: tuple[str, ...] = ()  # how its propose step picks a draft token: the chain of its own calls to sample_draft
    loads: tuple[str, ...] = ()  # the load_model bodies its load runs, ``module:Class`` each, through super() calls

    def owner(self, method: str) -> str | None:
        """The class whose ``method`` this one runs, or None where it has none."""
        return dict(self.resolved).get(method)

    @property
    def drafts_with_a_head(self) -> bool:
        """Whether it picks its draft token from a model's head (it has ``sample_draft``): n-gram and suffix do not."""
        return self.owner("sample_draft") is not None

    @property
    def reaches_the_switch(self) -> bool:
        """Whether its ``propose`` calls ``sample_draft``, where the switch routes the pick, through its own methods
        (DFlash2, XPress and DSpark pick otherwise: the switch, accepted at load, is never read)."""
        return bool(self.picks)

    @property
    def target(self) -> str:
        return f"{self.module}:{self.name}"


def _module(path: str) -> str:
    return "vllm." + path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _last(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _loads(line: list[str], classes: dict[str, _Class]) -> tuple[str, ...]:
    """The ``load_model`` bodies a load of the first class of ``line`` runs: the first definition along it, then each
    one its ``super().load_model`` reaches."""
    out, rest = [], line
    while owner := next((c for c in rest if "load_model" in classes[c].calls), None):
        out.append(f"{classes[owner].module}:{owner}")
        if "load_model" not in classes[owner].supers["load_model"]:
            break
        rest = rest[rest.index(owner) + 1 :]
    return tuple(out)


def _calls_on(fn: ast.FunctionDef | ast.AsyncFunctionDef, receiver: str) -> set[str]:
    """The methods ``fn`` calls on ``self`` (``receiver`` "self") or on ``super()`` ("super")."""
    out = set()
    for c in ast.walk(fn):
        if not (isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)):
            continue
        on = c.func.value.func if isinstance(c.func.value, ast.Call) and receiver == "super" else c.func.value
        if isinstance(on, ast.Name) and on.id == receiver:
            out.add(c.func.attr)
    return out


@dataclass
class _Class:
    module: str
    bases: tuple[str, ...]
    calls: dict[str, set[str]]  # each method it defines -> the methods it calls on self
    supers: dict[str, set[str]]  # each method it defines -> the methods it calls on super()


def _picks(line: list[str], classes: dict[str, _Class], goals: tuple[str, ...]) -> tuple[str, ...]:
    """The shortest chain of self-calls, each resolved along ``line`` as Python would, from ``propose`` to one of
    ``goals``; empty where there is none."""

    def owner(method: str) -> str | None:
        return next((c for c in line if method in classes[c].calls), None)

    paths, seen = [("propose",)], {"propose"}
    while paths:
        path = paths.pop(0)
        where = owner(path[-1])
        if where is None:
            continue
        for callee in sorted(classes[where].calls[path[-1]]):
            if callee in goals:
                return (*path, callee)
            if callee not in seen:
                seen.add(callee)
                paths.append((*path, callee))
    return ()


@cache
def scan() -> tuple[Speculator, ...]:
    """Every speculator class under :data:`FOLDER`, sorted by module and name (empty where the wheel has no Model
    Runner V2)."""
    return scan_classes(FOLDER, ROOT_CLASS, METHODS, ("sample_draft",))


def scan_classes(
    folder: str, root_class: str, methods: tuple[str, ...], goals: tuple[str, ...]
) -> tuple[Speculator, ...]:
    """Every class under vLLM's ``folder`` that derives, directly or through another, from ``root_class``, with
    where each of ``methods`` comes from and the chain from its ``propose`` to one of ``goals`` (where the switch
    routes the pick), sorted by module and name.  Read with ``ast``: nothing is imported."""
    root = vllm_root()
    classes: dict[str, _Class] = {}
    for path in sorted((root / folder).rglob("*.py")):
        tree = ast.parse(path.read_bytes(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name not in classes:
                fns = [f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
                bases = tuple(b for b in map(_last, node.bases) if b)
                module = _module(str(path.relative_to(root)))
                calls = {f.name: _calls_on(f, "self") for f in fns}
                classes[node.name] = _Class(module, bases, calls, {f.name: _calls_on(f, "super") for f in fns})

    def lineage(name: str) -> list[str]:  # the class, then its bases depth-first (single inheritance in practice)
        seen, order, todo = set(), [], [name]
        while todo:
            current = todo.pop(0)
            if current in seen or current not in classes:
                continue
            seen.add(current)
            order.append(current)
            todo = list(classes[current].bases) + todo
        return order

    found = []
    for name, found_class in classes.items():
        line = lineage(name)
        if name == root_class or root_class not in line:
            continue
        resolved = tuple(
            (m, owner) for m in methods for owner in [next((c for c in line if m in classes[c].calls), None)] if owner
        )
        defines = tuple(m for m in methods if m in found_class.calls)
        picks, loads = _picks(line, classes, goals), _loads(line, classes)
        found.append(Speculator(name, found_class.module, found_class.bases, defines, resolved, picks, loads))
    return tuple(sorted(found, key=lambda s: (s.module, s.name)))


def load(speculator: Speculator) -> type:
    """The class itself (its module imported)."""
    return getattr(importlib.import_module(speculator.module), speculator.name)


def stand_in(cls: type) -> object:
    """An instance of ``cls`` with its own methods and none of its constructor's GPU buffers: ``__init__`` is not run,
    and a class that leaves a method abstract (the base classes) is instantiated through a subclass that only says
    none is, so every method called is still ``cls``'s."""
    if getattr(cls, "__abstractmethods__", None):
        cls = type(cls.__name__, (cls,), {})
        cls.__abstractmethods__ = frozenset()
    return object.__new__(cls)


def refuses(speculator: Speculator, model_class: type, **config: object) -> str:
    """What ``_validate_local_argmax_reduction``, as ``speculator`` resolves it, says with the switch on to a draft
    whose class is ``model_class`` (an uninitialised instance: the check reads its class, not its weights), under the
    speculative config's fields ``config`` (``draft_sample_method``); "not refused: ..." where it lets it through."""
    cls = load(speculator)
    fields = {"draft_sample_method": "greedy", "use_local_argmax_reduction": True, **config}
    speculator_now = stand_in(cls)
    speculator_now.use_local_argmax_reduction = True
    speculator_now.speculative_config = SimpleNamespace(**fields)
    speculator_now.model = model_class.__new__(model_class)
    try:
        cls._validate_local_argmax_reduction(speculator_now)
    except ValueError as exc:
        return str(exc)
    return f"not refused: {speculator.name} let {model_class.__name__} through"


ESTIMATOR = "DraftModelSpeculator"  # the class whose load_model refuses the switch beside the acceptance estimator


def refuses_beside_the_estimator(speculator: Speculator, model_class: type) -> str:
    """What the speculator's load says with the switch on and adaptive verification's acceptance estimator, for a
    draft of ``model_class`` that has ``get_top_tokens``: ``DraftModelSpeculator.load_model`` run on the speculator's
    stand-in, where its load reaches that body (:attr:`Speculator.loads`, through ``super()``); the draft's loading
    (``load_draft_model``: a checkpoint) and the attention layers' registry (none) are the stand-in's."""
    from vllm.config import VllmConfig

    from engines.vllm.wheel.hardware import without_triton_cpu

    without_triton_cpu()  # VllmConfig() below: vLLM 0.34.0's platform check for its CPU runner's kernels, answered
    base = next((target for target in speculator.loads if target.endswith(f":{ESTIMATOR}")), None)
    if base is None:
        runs = ", ".join(speculator.loads) or "no load_model"
        return f"not refused: {speculator.name}'s load ({runs}) never reaches {ESTIMATOR}.load_model"
    module, _, name = base.partition(":")
    cls = load(speculator)
    drafter = stand_in(cls)
    drafter.load_draft_model = lambda target_model, target_attn_layer_names: model_class.__new__(model_class)
    drafter.vllm_config = SimpleNamespace(
        compilation_config=VllmConfig().compilation_config,  # no attention layer registered
        model_config=SimpleNamespace(supports_multimodal_inputs=False),
    )
    drafter.speculative_config = SimpleNamespace(draft_sample_method="greedy", use_local_argmax_reduction=True)
    drafter.use_local_argmax_reduction = drafter.use_acceptance_estimator = True
    drafter.use_draft_logits = False
    try:
        getattr(importlib.import_module(module), name).load_model(drafter, None)
    except ValueError as exc:
        return str(exc)
    return f"not refused: {ESTIMATOR}.load_model let the acceptance estimator through"
