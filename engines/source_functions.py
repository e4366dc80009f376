"""An engine's functions, run from its own files without importing the engine (which needs its dependencies, or
hardware: ``import sglang`` fails without ``orjson``, vllm-ascend's modules import ``torch_npu``).

:func:`source_functions` parses a file of the engine, keeps what is asked for (and the file's imports of other
packages), compiles it under the file's own path and line numbers (Triton's JIT and tracebacks read the real file),
and runs it in a namespace where each of the engine's names it uses is given.  Nothing is copied.
"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path
from typing import Any


def _imports(node: ast.stmt, packages: tuple[str, ...]) -> bool:
    """``import numpy as np``, ``from sglang.srt import x`` and the like, for a package of ``packages``."""
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
    if isinstance(node, ast.ImportFrom):
        names = [node.module or ""]
    return any(n.split(".")[0] in packages for n in names)


class _WithoutImports(ast.NodeTransformer):
    """A kept function's own imports of the engine (run at call time) left out: the names they bind are the
    module's, from ``given``."""

    def __init__(self, packages: tuple[str, ...]) -> None:
        self.packages = packages

    def visit_Import(self, node: ast.Import) -> ast.stmt:
        return ast.copy_location(ast.Pass(), node) if _imports(node, self.packages) else node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.stmt:
        return ast.copy_location(ast.Pass(), node) if _imports(node, self.packages) else node


def _compile_decorator(node: ast.expr) -> bool:
    """``@torch.compile(...)``: dropped (the engines' functions run eagerly here)."""
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "compile"


def _kept_class(node: ast.ClassDef, keep: tuple[str, ...]) -> ast.ClassDef | None:
    """``node`` whole where ``keep`` names it, a class of no base holding just the methods ``keep`` names as
    ``Class.method`` (a worker's method, without the worker), or None."""
    if node.name in keep:
        return node
    wanted = {k.partition(".")[2] for k in keep if k.startswith(f"{node.name}.")}
    methods = [m for m in node.body if isinstance(m, ast.FunctionDef) and m.name in wanted]
    if not methods:
        return None
    bare = ast.ClassDef(name=node.name, bases=[], keywords=[], body=methods, decorator_list=[], type_params=[])
    return ast.copy_location(bare, node)


def source_functions(
    module_name: str,
    path: Path,
    keep: tuple[str, ...] | None,
    given: dict[str, Any],
    engine: tuple[str, ...],
    drop: tuple[str, ...] = (),
) -> types.ModuleType:
    """A private module ``module_name`` holding ``path``'s top-level statements: every one but its imports of the
    ``engine`` packages when ``keep`` is None, else its other imports and the functions and classes named in
    ``keep`` (``Class.method``: that method alone, in a class of no base; a kept function's own imports of the
    engine left out too); the engine's names come from ``given``.  Imports of the packages in ``drop`` (NumPy,
    which the kept code never calls) are left out too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    body, found = [], set()
    for node in tree.body:
        if _imports(node, engine) or _imports(node, drop):
            continue
        if keep is not None:
            if isinstance(node, ast.FunctionDef) and node.name in keep:
                node.decorator_list = [d for d in node.decorator_list if not _compile_decorator(d)]
                node = _WithoutImports(engine).visit(node)
                found.add(node.name)
            elif isinstance(node, ast.ClassDef) and (kept := _kept_class(node, keep)) is not None:
                found |= {node.name} | {f"{node.name}.{m.name}" for m in kept.body if isinstance(m, ast.FunctionDef)}
                node = kept
            elif not isinstance(node, ast.Import | ast.ImportFrom):
                continue
        body.append(node)
    if keep is not None and set(keep) - found:
        raise RuntimeError(f"{path} defines no {sorted(set(keep) - found)}")
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    module.__dict__.update(given)
    sys.modules[module_name] = module  # Triton's JIT looks a kernel's module up by name
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), module.__dict__)  # noqa: S102
    return module
