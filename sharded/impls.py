"""Name an implementation under test: a built-in short name or ``package.module:attr``."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sharded.local_argmax import BUILTINS as ARGMAX_BUILTINS
from sharded.local_sampling import SAMPLING_BUILTINS
from sharded.local_top_k import TOPK_BUILTINS
from sharded.no_exit import ImplementationExit, guarded

BUILTINS = {**ARGMAX_BUILTINS, **TOPK_BUILTINS, **SAMPLING_BUILTINS}
# Built-ins that live above this package (engines/) are named by MODULE:ATTR and imported only when asked for, so
# that sharded/ never imports engines/.  The engine variants run anywhere.  The optional built-ins need what the
# default install lacks (Triton, CUDA, an engine's wheel) and are offered by name only where they can run:
# name -> (MODULE:ATTR, MODULE:function that says why it cannot run here, or returns None when it can).
ENGINE_BUILTINS = {"trtllm_style": "engines.variants:trtllm_style", "sglang_style": "engines.variants:sglang_style"}
_VLLM = "engines.vllm.subjects.layer"
_SGLANG = "engines.sglang.wheel.kernels"
_DFLASH = "engines.sglang.subjects.dflash_draft"
OPTIONAL = {
    "triton_key": ("sharded.triton_key:triton_key", "sharded.triton_key:why_unavailable"),
    "vllm": (f"{_VLLM}:vllm_local_argmax", f"{_VLLM}:why_unavailable"),
    "vllm_classic": (f"{_VLLM}:vllm_classic", f"{_VLLM}:why_unavailable"),
    "vllm_topk": (f"{_VLLM}:vllm_top_k", f"{_VLLM}:why_unavailable"),
    "vllm_topk_logprobs": (f"{_VLLM}:vllm_top_k_log_probs", f"{_VLLM}:why_unavailable"),
    "sglang_deferred_argmax": (f"{_SGLANG}:sglang_deferred_argmax", f"{_SGLANG}:why_unavailable"),
    "sglang_classic": (f"{_SGLANG}:sglang_classic", f"{_SGLANG}:why_unavailable"),
    "sglang_dflash_draft_graph": (f"{_DFLASH}:sglang_dflash_draft_graph", f"{_DFLASH}:why_unavailable"),
    "sglang_dflash_draft_eager": (f"{_DFLASH}:sglang_dflash_draft_eager", f"{_DFLASH}:why_unavailable"),
    "sglang_domino_first_ids": (f"{_DFLASH}:sglang_domino_first_ids", f"{_DFLASH}:why_unavailable"),
}
# Modules that moved, by the names committed repro files and report JSON still record (specs such as
# ``sharded.vllm_models:Gemma4MTP[dense].get_top_tokens``): old module -> where it lives now.  A name is matched
# whole: ``engines.sglang`` is now a package, and its old spec ``engines.sglang:sglang_classic`` the kernels'.
MOVED = {
    "sharded.vllm_models": "engines.vllm.subjects.models",
    "sharded.vllm_layer": "engines.vllm.subjects.layer",
    "sharded.engine_variants": "engines.variants",
    "engines.sglang": _SGLANG,
    "engines.sglang_wheel": "engines.sglang.wheel.compiled",
    "engines.sglang_sampling": "engines.sglang.subjects.sampling",
    "engines.sglang_sampling_wheel": "engines.sglang.wheel.runtime",
    "engines.tpu_inference": "engines.tpu_inference.wheel.adapter",
    "engines.tpu_inference_sampler": "engines.tpu_inference.subjects.sampler",
    "engines.tpu_inference_fixes": "engines.tpu_inference.corrections.masks",
    "engines.tpu_inference_findings": "engines.tpu_inference.causes.findings",
    "engines.sampling_findings": "engines.sampling_page",
    **{f"engines.vllm.{m}": f"engines.vllm.subjects.{m}" for m in ("models", "corrected", "gumbel", "dflash2_sampler")},
    **{f"engines.vllm.{m}": f"engines.vllm.subjects.{m}" for m in ("topk_topp_triton", "xpress_argmax", "layer")},
    "engines.vllm.known_defects": "engines.vllm.causes.known_defects",
    "engines.vllm.findings": "engines.vllm.causes.findings",
    "engines.sglang.findings": "engines.sglang.causes.findings",
    "engines.sglang.kernels": _SGLANG,
    "engines.sglang.fixes": "engines.sglang.corrections.greedy",
    **{f"engines.sglang.{m}": f"engines.sglang.subjects.{m}" for m in ("dflash_draft", "selector", "domino_rollout")},
    **{f"engines.sglang.{m}": f"engines.sglang.subjects.{m}" for m in ("eagle_verify", "dp_lm_head")},
}
# A page's findings under the name a report recorded before releases were data (engines/vllm/releases): a release's
# module, and 0.32.0's causes, which its release file now extends with the claims of rows added later.
MOVED_FINDINGS = {
    "engines.vllm.release_0_33_0:FINDINGS": "engines.vllm.releases:vllm_0_33_0",
    "engines.vllm.release_0_33_0_sampling:FINDINGS": "engines.vllm.releases:sampling_0_33_0",
    **dict.fromkeys(
        ("engines.vllm.findings:FINDINGS", "engines.vllm.causes.findings:FINDINGS"), "engines.vllm.releases:vllm_0_32_0"
    ),
}

# The project's own modules of implementations under test.  A repro file names the implementation it recorded;
# replaying it imports that name only if it is a built-in or a public callable of one of these (``shipped``), since
# a file received with a module beside it would otherwise run that module.  Anything else needs the user's word.
# A moved module's old name is shipped where its new home is (not the findings' or the wheel loaders' old names).
_SHIPPED = {
    *"tests.broken tests.broken_top_k tests.broken_sampling tests.broken_layouts engines.variants".split(),
    *"engines.sglang.wheel.kernels engines.sglang.corrections.greedy engines.tpu_inference.wheel.adapter".split(),
    *(f"engines.sglang.subjects.{m}" for m in "dflash_draft dp_lm_head selector eagle_verify domino_rollout".split()),
    *(f"engines.vllm.subjects.{m}" for m in "layer models corrected gumbel dflash2_sampler xpress_argmax".split()),
    "engines.vllm.subjects.speculators",
    *(f"engines.ascend.subjects.{m}" for m in "greedy sampling".split()),
    "engines.ascend.corrections.reduce",
    *"engines.vllm.subjects.topk_topp_triton engines.sglang.subjects.sampling".split(),
    *"engines.tpu_inference.subjects.sampler engines.tpu_inference.corrections.masks".split(),
}
SHIPPED_MODULES = frozenset(_SHIPPED | {old for old, new in MOVED.items() if new in _SHIPPED})

IMPL_ENV = "TPARGMAX_IMPL"
TOPK_IMPL_ENV = "TPARGMAX_TOPK_IMPL"
SAMPLING_IMPL_ENV = "TPARGMAX_SAMPLING_IMPL"


@dataclass(frozen=True)
class Impl:
    """An implementation under test and the spec that names it (for replay commands)."""

    spec: str
    fn: Callable[..., torch.Tensor]

    def __str__(self) -> str:
        return self.spec

    @property
    def process_bound(self) -> bool:
        """Whether it needs a process of its own per rank (an engine's distributed state): not on ``sim``."""
        return bool(getattr(self.fn, "process_bound", False))

    @property
    def classic(self) -> bool:
        """Whether it is a classic path (gather every logit, scatter through ``d2t``, argmax): ``fn.path``."""
        return getattr(self.fn, "path", "local") == "classic"

    def refuses_layout(self, name: str) -> str | None:
        """Why it does not take the layout ``name`` (``diverged``, ``dp``, ``uneven``), or None: ``fn.layouts``, the
        layouts an implementation declares it takes, with ``fn.layouts_why``; attention data parallel also needs
        the ``dp_rows`` keyword in its signature."""
        declared = getattr(self.fn, "layouts", None)
        if declared is not None and name not in declared:
            return f"{self} takes no {name} layout: {getattr(self.fn, 'layouts_why', 'it declares ' + str(declared))}"
        if name == "dp" and not self.takes_dp_rows:
            return f"{self} takes no dp_rows keyword: attention data parallel hands each rank its own rows"
        return None

    def refuses_property(self, name: str) -> str | None:
        """Why it takes no part in the property ``name``, or None: ``fn.judged_only`` names the properties that
        judge an implementation whose tokens no classic path computes (a selector's walk), ``fn.judged_why`` why."""
        judged = getattr(self.fn, "judged_only", None)
        if judged is not None and name not in judged:
            return f"{self} is judged by {', '.join(judged)} alone: {getattr(self.fn, 'judged_why', '')}"
        return None

    @property
    def takes_dp_rows(self) -> bool:
        """Whether it takes attention data parallel's ``dp_rows`` keyword (its signature names it, or any keyword)."""
        try:
            params = inspect.signature(self.fn).parameters.values()
        except (TypeError, ValueError):  # a callable without a signature: it may take it, the run will tell
            return True
        return any(p.name == "dp_rows" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)

    @property
    def head(self) -> dict[str, object]:
        """Case fields the implementation fixes (a model class built once for one head); empty if none."""
        return dict(getattr(self.fn, "head", None) or {})

    def why_unavailable(self) -> str | None:
        """What it needs that this machine lacks (an engine, a device, a communicator), or None: ``fn.needs()``,
        where the implementation declares it.  Where it says something, a run here would judge other code than
        the one named, so a replay refuses to judge rather than read a pass as a fix."""
        needs = getattr(self.fn, "needs", None)
        return needs() if needs is not None else None

    @property
    def env(self) -> tuple[str, ...]:
        """The environment variables that change what it runs (``fn.env``): a repro file records their values."""
        return tuple(getattr(self.fn, "env", ()))

    @property
    def packages(self) -> tuple[str, ...]:
        """The distributions whose code it runs (``fn.packages``): a repro file records their installed versions."""
        return tuple(getattr(self.fn, "packages", ()))

    def pass_unjudged(self, versions: dict[str, str]) -> str | None:
        """Why a pass here of a failure recorded with ``versions`` (a repro file's) would not show a fix, or None:
        ``fn.pass_unjudged(versions)``, where the implementation declares it (another build of the same release's
        code computes what the failure was about)."""
        check = getattr(self.fn, "pass_unjudged", None)
        return check(versions) if check is not None else None

    def cannot_start(self) -> str | None:
        """Why its start-up cannot succeed on this machine, in one line with what it needs, or None: ``fn.preflight()``,
        where the implementation declares it (an engine whose build refuses this machine), asked once before a run
        starts any rank."""
        preflight = getattr(self.fn, "preflight", None)
        return preflight() if preflight is not None else None

    def start(self, group: object) -> None:
        """Its once-per-process start-up (``fn.start(group)``, if any), run before its first task and
        outside the collective timeout: an engine's imports and distributed set-up take seconds."""
        start = getattr(self.fn, "start", None)
        if start is not None:
            start(group)


def _attr(where: str):
    module, _, attr = where.partition(":")
    return getattr(importlib.import_module(module), attr)


def why_unavailable(name: str) -> str | None:
    """Why the optional built-in ``name`` cannot run here (what to install, or what the machine lacks), or None."""
    return _attr(OPTIONAL[name][1])()


def shipped(spec: str) -> bool:
    """Whether ``spec`` is a built-in name or names a public callable of a module the project ships."""
    if spec in BUILTINS or spec in ENGINE_BUILTINS or spec in OPTIONAL:
        return True
    module, sep, attr = spec.partition(":")
    return bool(sep) and module in SHIPPED_MODULES and bool(attr) and not attr.startswith("_")


def load_impl(spec: str) -> Impl:
    """A built-in short name (``vllm_pairs``, ``packed_key``, ``topk_pairs``, ...) or ``package.module:attr``."""
    if spec in BUILTINS:
        return Impl(spec, BUILTINS[spec])
    if spec in ENGINE_BUILTINS:
        return Impl(spec, _attr(ENGINE_BUILTINS[spec]))
    if spec in OPTIONAL:
        why = why_unavailable(spec)
        if why:
            raise ValueError(f"--impl {spec}: {why}")
        return Impl(spec, _attr(OPTIONAL[spec][0]))
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        names = sorted({*BUILTINS, *ENGINE_BUILTINS, *OPTIONAL})
        raise ValueError(f"--impl {spec!r}: use a built-in name {names} or MODULE:ATTR")
    try:
        with guarded(f"importing {module}"):  # a module that exits on import is refused, not obeyed
            fn = getattr(importlib.import_module(MOVED.get(module, module)), attr)
    except (ImportError, AttributeError, ImplementationExit) as exc:
        raise ValueError(f"--impl {spec!r}: cannot load it: {exc}") from exc
    except Exception as exc:  # whatever the module raises as it is imported
        raise ValueError(f"--impl {spec!r}: cannot load it: {type(exc).__name__}: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"--impl {spec!r}: {attr} is not callable")
    return Impl(spec, fn)


def runnable(impl: Impl) -> Impl:
    """``impl``, or a ValueError that names what it needs and this machine lacks (:meth:`Impl.why_unavailable`), or
    why it cannot start here (:meth:`Impl.cannot_start`): a replay without it would judge other code, so it is not
    run."""
    why = impl.why_unavailable() or impl.cannot_start()
    if why:
        raise ValueError(f"--impl {impl}: cannot be judged here: {why}")
    return impl
