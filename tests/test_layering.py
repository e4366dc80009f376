"""The floors stay floors: no package imports one above it, and no module imports itself back through others.

From the bottom: ``reference`` (the oracle) imports nothing of the project; ``sharded`` (the local path) only
``reference``; ``groups`` (where ranks run) only those two; ``engines`` (other people's code under test) never
``groups``, ``properties`` or ``tpargmax``, and inside an engine each wing (``ENGINE_WINGS``) only its own floor and
those below; ``benchmarks`` (what each path moves and costs) only the floors below ``engines``; ``properties`` never
``benchmarks`` or ``tpargmax``, and inside it each wing (``WINGS``) only its own floor and those below. Imports are read
with ``ast`` (every static import, also inside functions); ``importlib.import_module`` strings, such as
``sharded.impls``' lazily named engine built-ins, are not followed.

Where modules live may change, what was recorded may not: every ``MODULE:ATTR`` that committed repro files and
report JSON name (and the built-ins' own) still names a module of the tree, through ``sharded.impls.MOVED`` where
the module moved, and a name that module defines.  Read from the files alone, so no engine is needed.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

from sharded.impls import ENGINE_BUILTINS, MOVED, MOVED_FINDINGS, OPTIONAL

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("reference", "sharded", "groups", "engines", "benchmarks", "properties", "tpargmax", "tests", "examples")
PROJECT = {*PACKAGES, "conftest"}
# package -> the project's top-level names it must never import
FORBIDDEN = {
    "reference": PROJECT - {"reference"},
    "sharded": PROJECT - {"reference", "sharded"},
    "groups": PROJECT - {"reference", "sharded", "groups"},
    "engines": {"groups", "benchmarks", "properties", "tpargmax", "tests", "conftest"},
    "benchmarks": {"engines", "properties", "tpargmax", "tests", "conftest"},
    "properties": {"benchmarks", "tpargmax", "tests", "conftest"},
}


# properties/'s wings, from the bottom: a case and a sampling plan (structure), then how a property fails and what
# the oracle answers, then the harness that runs ranks and budgets a run, then the argmax and top-k checks, the
# sampling checks, vLLM's engine end to end, and the repro files every property writes and reads.  A wing imports
# only its own floor and those below; the modules at the top of properties/ (the test files, strategies, the replay
# and torchrun commands) may import any.
WINGS = (
    ("properties.cases",),
    ("properties.failures", "properties.oracle"),
    ("properties.harness",),
    ("properties.argmax",),
    ("properties.sampling",),
    ("properties.e2e",),
    ("properties.repro",),
)


# every engine's wings, from the bottom: loading its installed code (``wheel``); what runs under test and the
# corrections beside it (``subjects``, ``corrections``); what its pages say, the causes and their scripts (``causes``);
# its releases as data (``releases``); its whole engine end to end (``e2e``).  A wing imports no engine's wing above.
ENGINE_WINGS = (("wheel",), ("subjects", "corrections"), ("causes",), ("releases",), ("e2e",))


def engine_floor(name: str) -> int | None:
    """The floor of a module in an engine's wing (``engines.vllm.causes.findings``: causes), or None outside them."""
    parts = name.split(".")
    if parts[0] == "engines" and len(parts) > 2:
        return next((floor for floor, wings in enumerate(ENGINE_WINGS) if parts[2] in wings), None)
    return None


def up_an_engine_wing(name: str, target: str) -> bool:
    """Whether ``name``, in an engine's wing, imports a module of a wing above its own."""
    mine, theirs = engine_floor(name), engine_floor(target)
    return mine is not None and theirs is not None and theirs > mine


def wing_floor(name: str) -> int:
    """The floor of a module of properties/ (the top, above every wing, for the modules outside them)."""
    for floor, wings in enumerate(WINGS):
        if any(name == w or name.startswith(f"{w}.") for w in wings):
            return floor
    return len(WINGS)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages (and ``conftest``), by dotted name."""
    found = {"conftest": root / "conftest.py"}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per process and content (three tests walk the whole tree)."""
    return _parse(path.read_bytes(), str(path))


@functools.cache
def _parse(source: bytes, name: str) -> ast.Module:
    return ast.parse(source, name)


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """The project's modules ``name`` imports statically, with the line of each import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            # ``from a import b``: the module a.b where there is one, else a name of a
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out += [(t, node.lineno) for t in targets if t.split(".")[0] in PROJECT]
    return out


def graph(root: Path = ROOT) -> tuple[dict[str, Path], dict[str, list[tuple[str, int]]]]:
    found = modules(root)
    return found, {name: imports(name, path, set(found)) for name, path in found.items()}


def layering_violations(root: Path = ROOT) -> list[str]:
    found, edges = graph(root)
    out = []
    for name, targets in edges.items():
        banned = FORBIDDEN.get(name.split(".")[0], set())
        out += [
            f"{found[name].relative_to(root)}:{line}: imports {target}"
            for target, line in targets
            if target.split(".")[0] in banned
            or (
                name.startswith("properties.")
                and target.startswith("properties.")
                and wing_floor(target) > wing_floor(name)
            )
            or up_an_engine_wing(name, target)
        ]
    return sorted(out)


def cycles(root: Path = ROOT) -> list[list[str]]:
    """Every strongly connected set of two or more modules (or a module that imports itself), Tarjan's way."""
    _, edges = graph(root)
    succ = {n: sorted({t for t, _ in targets if t in edges}) for n, targets in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        for m in succ[n]:
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            component = []
            while not component or component[-1] != n:
                component.append(stack.pop())
            if len(component) > 1 or n in succ[n]:
                out.append(sorted(component))

    for n in sorted(succ):
        if n not in index:
            visit(n)
    return out


def test_no_package_imports_one_above_it():
    violations = layering_violations()
    assert not violations, "imports that run up a floor:\n" + "\n".join(violations)


def test_no_import_cycle():
    found = cycles()
    assert not found, "modules that import each other, round a cycle: " + "; ".join(", ".join(c) for c in found)


def foreign_writes(root: Path = ROOT) -> list[str]:
    """Assignments to another module's globals (``runner.device = ...``) outside ``tests/``: a run's settings live
    in one object (``properties.harness.settings``), never in globals written from outside their module."""
    found = modules(root)
    out = []
    for name, path in found.items():
        if name.startswith("tests"):
            continue
        tree = parsed(path)
        aliases = {}  # local name -> project module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases |= {a.asname: a.name for a in node.names if a.asname and a.name in found}
            elif isinstance(node, ast.ImportFrom) and node.module:
                aliases |= {
                    a.asname or a.name: f"{node.module}.{a.name}"
                    for a in node.names
                    if f"{node.module}.{a.name}" in found
                }
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            out += [
                f"{path.relative_to(root)}:{node.lineno}: writes {aliases[t.value.id]}.{t.attr}"
                for t in targets
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in aliases
            ]
    return sorted(out)


def test_no_module_writes_another_modules_globals():
    writes = foreign_writes()
    assert not writes, "module globals written from outside their module:\n" + "\n".join(writes)


def test_the_checks_see_a_bad_import(tmp_path):
    """A planted upward import and a planted cycle are found (the checks are not vacuous)."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "reference" / "oracle.py").write_text("def f():\n    from sharded import layout\n")
    (tmp_path / "sharded" / "layout.py").write_text("from engines.vllm import layer\n")
    (tmp_path / "sharded" / "keys.py").write_text("import groups.pool\n")
    (tmp_path / "engines" / "vllm").mkdir()
    (tmp_path / "engines" / "vllm" / "__init__.py").write_text("")
    (tmp_path / "engines" / "vllm" / "layer.py").write_text(
        "from ..vllm import models\nimport properties.argmax.checks\n"
    )
    (tmp_path / "engines" / "vllm" / "models.py").write_text("from . import layer\n")
    for wing in ("subjects", "causes"):
        (tmp_path / "engines" / "vllm" / wing).mkdir()
    (tmp_path / "engines" / "vllm" / "subjects" / "topk.py").write_text("from engines.vllm.causes import findings\n")
    (tmp_path / "engines" / "vllm" / "causes" / "findings.py").write_text("from engines.vllm.wheel import build\n")
    (tmp_path / "properties" / "checks.py").write_text("from tpargmax.cli import main\n")
    for wing in ("argmax", "cases", "sampling"):
        (tmp_path / "properties" / wing).mkdir()
        (tmp_path / "properties" / wing / "__init__.py").write_text("")
    (tmp_path / "properties" / "argmax" / "checks.py").write_text("from properties.sampling import faults\n")
    (tmp_path / "properties" / "sampling" / "faults.py").write_text("from properties.argmax import checks\n")
    (tmp_path / "properties" / "cases" / "case.py").write_text("import properties.strategies\n")
    (tmp_path / "properties" / "strategies.py").write_text("from properties.sampling.faults import x\n")
    assert layering_violations(tmp_path) == [
        "engines/vllm/layer.py:2: imports properties.argmax.checks",
        "engines/vllm/subjects/topk.py:1: imports engines.vllm.causes.findings",
        "properties/argmax/checks.py:1: imports properties.sampling.faults",
        "properties/cases/case.py:1: imports properties.strategies",
        "properties/checks.py:1: imports tpargmax.cli",
        "reference/oracle.py:2: imports sharded.layout",
        "sharded/keys.py:1: imports groups.pool",
        "sharded/layout.py:1: imports engines.vllm.layer",
    ]
    (tmp_path / "properties" / "runner.py").write_text("device = 'cpu'\n")
    (tmp_path / "conftest.py").write_text("from properties import runner\nrunner.device = 'cuda'\n")
    assert foreign_writes(tmp_path) == ["conftest.py:2: writes properties.runner.device"]
    assert sorted(cycles(tmp_path)) == [
        ["engines.vllm.layer", "engines.vllm.models"],
        ["properties.argmax.checks", "properties.sampling.faults"],
    ]


# a recorded implementation or findings: ``engines.sglang_sampling:sglang_candidate_topk`` in a repro file's "impl",
# a report's rows and replay commands (an attribute path such as ``Gemma4MTP[dense].get_top_tokens`` reads its head)
RECORDED = re.compile(r"\b((?:engines|sharded|tests)(?:\.\w+)+):(\w+)")


def recorded_specs(root: Path = ROOT) -> set[tuple[str, str]]:
    """(module, attribute) of every spec the committed repro files and reports record, by git's list of them (a
    user's own finds, untracked, are theirs)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "repro", "docs/conformance"], cwd=root, capture_output=True, text=True
    )
    names = listed.stdout.split("\0") if listed.returncode == 0 else []
    files = [root / n for n in names if n.endswith(".json")] or [*(root / "repro").rglob("*.json")]
    return {spec for path in files for spec in RECORDED.findall(path.read_text(encoding="utf-8"))}


def defined(tree: ast.Module) -> set[str]:
    """The names a module defines at its top: functions, classes, assignments (tuples too) and imports."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out |= {a.asname or a.name.partition(".")[0] for a in node.names}
    return out


def test_every_recorded_name_still_names_a_module_and_what_it_defines():
    found = modules()
    specs = recorded_specs()
    assert {module for module, _ in specs} & set(MOVED), "no recorded name of a moved module: the reading is broken"
    builtins = [*ENGINE_BUILTINS.values(), *(spec for pair in OPTIONAL.values() for spec in pair)]
    specs |= {tuple(spec.split(":")) for spec in builtins}
    specs = {tuple(MOVED_FINDINGS.get(f"{m}:{a}", f"{m}:{a}").split(":")) for m, a in specs}  # releases, now data
    lost = []
    for module, attr in sorted(specs):
        home = MOVED.get(module, module)
        names = defined(parsed(found[home])) if home in found else set()
        if attr not in names and "__getattr__" not in names:  # engines.vllm.subjects.models names its subjects that way
            lost.append(f"{module}:{attr}" + (f" (now {home})" if home != module else ""))
    assert lost == [], "recorded names that no longer load: " + ", ".join(lost)


def test_a_moved_module_is_not_also_where_it_was():
    """Each old name leads to a module that exists, and no plain module is left at an old name, where
    ``load_impl`` would never look (``engines.sglang`` is a package now: its old specs are its kernels')."""
    found = modules()
    assert [new for new in MOVED.values() if new not in found] == []
    assert [old for old in MOVED if old in found and found[old].name != "__init__.py"] == []
