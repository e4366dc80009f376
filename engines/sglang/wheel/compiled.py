"""Functions of SGLang's wheel files, run without importing ``sglang`` (which needs SGLang's dependencies).

Every module that defines SGLang's sampling functions starts with ``from sglang...`` imports, and ``import sglang``
fails without ``orjson`` and the rest.  :func:`wheel_functions` parses a wheel file, keeps what is asked for (and the
file's non-SGLang imports), compiles it under the file's own path and line numbers (Triton's JIT and tracebacks
read the real file), and runs it in a namespace where each SGLang name it uses is given.  Nothing is copied.
"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path
from typing import Any

from engines.versions import SGLANG_VERSION


def _is_sglang_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == "sglang"
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == "sglang" for a in node.names)


class _WithoutSglangImports(ast.NodeTransformer):
    """A kept function's own ``from sglang... import`` statements (run at call time) left out: the names they bind
    are the module's, from ``given``."""

    def visit_Import(self, node: ast.Import) -> ast.stmt:
        return ast.copy_location(ast.Pass(), node) if _is_sglang_import(node) else node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.stmt:
        return ast.copy_location(ast.Pass(), node) if _is_sglang_import(node) else node


def _imports(node: ast.stmt, packages: tuple[str, ...]) -> bool:
    """``import numpy as np`` and the like, for a package of ``packages``."""
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
    if isinstance(node, ast.ImportFrom):
        names = [node.module or ""]
    return any(n.split(".")[0] in packages for n in names)


def _compile_decorator(node: ast.expr) -> bool:
    """``@torch.compile(...)``: dropped (SGLang's functions run eagerly here)."""
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


def wheel_functions(
    name: str, path: Path, keep: tuple[str, ...] | None, given: dict[str, Any], drop: tuple[str, ...] = ()
) -> types.ModuleType:
    """A private module holding ``path``'s top-level statements: every one but its SGLang imports when ``keep`` is
    None, else its non-SGLang imports and the functions and classes named in ``keep`` (``Class.method``: that
    method alone, in a class of no base; a kept function's own SGLang imports left out too); SGLang's names come
    from ``given``.  Imports of the packages in ``drop``
    (NumPy, which the kept code never calls) are left out too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    body, found = [], set()
    for node in tree.body:
        if _is_sglang_import(node) or _imports(node, drop):
            continue
        if keep is not None:
            if isinstance(node, ast.FunctionDef) and node.name in keep:
                node.decorator_list = [d for d in node.decorator_list if not _compile_decorator(d)]
                node = _WithoutSglangImports().visit(node)
                found.add(node.name)
            elif isinstance(node, ast.ClassDef) and (kept := _kept_class(node, keep)) is not None:
                found |= {node.name} | {f"{node.name}.{m.name}" for m in kept.body if isinstance(m, ast.FunctionDef)}
                node = kept
            elif not isinstance(node, ast.Import | ast.ImportFrom):
                continue
        body.append(node)
    if keep is not None and set(keep) - found:
        raise RuntimeError(f"{path} defines no {sorted(set(keep) - found)}")
    module_name = f"tpargmax_sglang_{SGLANG_VERSION.replace('.', '_')}_{name}"
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    module.__dict__.update(given)
    sys.modules[module_name] = module  # Triton's JIT looks a kernel's module up by name
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), module.__dict__)  # noqa: S102
    return module
