"""The page's rows: the subjects ``tpargmax report`` runs, and the pytest runs that group them (one per head they
share, so one pool start serves them all)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from engines.versions import TPU_INFERENCE_VERSION, VLLM_VERSION, vllm_release
from engines.vllm.releases import findings_spec
from engines.vllm.subjects.layer import INSTALL_HINT as VLLM_HINT
from engines.vllm.subjects.layer import SHM_ENV
from engines.vllm.wheel.build import shipped
from sharded.impls import MOVED

# the committed repro files' replays are the default run's regression tests, not properties of a subject; the samplers
# are subjects of their own
ARGMAX = ("properties", "-k", "not top_k and not test_sampling and not test_repro_file_replays_clean")
TOP_K = ("properties/test_top_k.py", "-k", "not test_repro_file_replays_clean")
SAMPLING = ("properties/test_sampling.py",)


@dataclass(frozen=True)
class Subject:
    """One row of the page: an implementation, what kind it is, and what it is."""

    spec: str
    kind: str
    note: str = ""
    name: str = ""  # how the page names it (default: the spec)
    vllm: bool = False
    corrects: str = ""  # the row this one is the corrected twin of (engines/<engine>/corrected.py)
    needs: str = ""  # MODULE:function saying why it cannot run here (what to install), or None when it can
    since: str = ""  # the first vLLM release whose samplers' page has this row (empty: every release's)

    def why_not(self, has_vllm: bool) -> str | None:
        """Why this subject cannot run here, or None."""
        if self.needs:
            module, _, name = self.needs.partition(":")
            return getattr(importlib.import_module(MOVED.get(module, module)), name)()
        return None if has_vllm or not self.vllm else VLLM_HINT

    @property
    def label(self) -> str:
        return self.name or self.spec

    def corrected_twin(self, fixes: str, correction: str) -> Subject:
        """The row of ``fixes``' ``NAME_corrected``, this row with the project's corrections (``correction`` says
        what they change), beside it on the page."""
        return Subject(
            f"{fixes}:{self.name}_corrected",
            self.kind + CORRECTED_KIND,
            f"the same, corrected: {correction}",
            f"{self.name} (corrected)",
            corrects=self.name,
            needs=self.needs,
        )


@dataclass(frozen=True)
class Run:
    """One pytest run: subjects that share a head (so one pool start serves them all), top-k or argmax."""

    subjects: tuple[Subject, ...]
    top_k: bool = False
    argmax: str = ""  # the argmax implementation the top-k subjects' top-1 is compared with
    env: tuple[tuple[str, str], ...] = ()
    tests: tuple[str, ...] = ()  # pytest's selection (default: every argmax, top-k or sampling property)
    sampling: bool = False  # samplers (--sampling-impl) rather than argmax or top-k implementations
    timeout: float = 30.0  # the collective timeout (Triton's interpreter runs a kernel in seconds, not microseconds)

    @property
    def args(self) -> tuple[str, ...]:
        specs = ",".join(s.spec for s in self.subjects)
        if self.sampling:
            return ("--sampling-impl", specs, *(self.tests or SAMPLING))
        if self.top_k:
            return ("--topk-impl", specs, "--impl", self.argmax, *(self.tests or TOP_K))
        return ("--impl", specs, *(self.tests or ARGMAX))

    def option(self, subject: Subject) -> tuple[str, str]:
        """The pytest option that selects one subject alone, for replay commands."""
        return ({"sampling": "--sampling-impl", "top_k": "--topk-impl"}.get(self.kind, "--impl"), subject.spec)

    @property
    def kind(self) -> str:
        return "sampling" if self.sampling else "top_k" if self.top_k else "argmax"


FINDINGS = findings_spec(VLLM_VERSION)  # the default release's pages
SAMPLING_FINDINGS = findings_spec(VLLM_VERSION, "sampling")
CORRECTED = "engines.vllm.corrected"  # recorded names (sharded.impls.MOVED): the pages' keys stay
CORRECTED_KIND = ", corrected"
FIXED_ARGMAX = f"{CORRECTED}:vllm"  # a corrected top-k's top-1 is compared with the corrected argmax


def twin(subject: Subject) -> Subject:
    """The subject with the project's corrections in place, beside it on the page."""
    spec = subject.spec.partition(":")[2] or subject.spec
    return Subject(
        f"{CORRECTED}:{spec}",
        subject.kind + CORRECTED_KIND,
        "the same, with the corrections of the root causes in place",
        f"{subject.label} (corrected)",
        vllm=True,
        corrects=subject.label,
        needs=subject.needs,
    )


def static_runs() -> list[Run]:
    """The built-ins, the engine variants and vLLM's layer, and vLLM's layer corrected."""
    layer = "vLLM layer"
    vllm = Subject("vllm", layer, "LogitsProcessor.get_top_tokens + LocalArgmaxMixin", vllm=True)
    classic = Subject("vllm_classic", layer, "LogitsProcessor.forward, EAGLE3 scatter, argmax", vllm=True)
    topk_note = "LogitsProcessor.get_top_k_tokens; ids through d2t as the mixin maps them"
    topk = Subject("vllm_topk", layer, topk_note, vllm=True)
    logprobs = Subject("vllm_topk_logprobs", layer, "get_top_k_tokens(return_log_probs=True)", vllm=True)
    shm_note = "get_top_k_tokens on vLLM's shared-memory CPU communicator (TPARGMAX_VLLM_SHM=1)"
    # skipped, with the reason, where vLLM cannot start that communicator: it would gather through torch.distributed
    shm_needs = "engines.vllm.subjects.layer:why_shm_unavailable"
    shm = Subject("vllm_topk", layer, shm_note, name="vllm_topk (CPU SHM)", vllm=True, needs=shm_needs)
    shm_env = ((SHM_ENV, "1"),)
    return [
        Run(
            (
                Subject("vllm_pairs", "built-in", "vLLM's exchange, ties by id"),
                Subject("packed_key", "built-in", "one int64 key, one all_reduce"),
                Subject("classic_gather", "built-in", "all-gather every logit, argmax"),
                Subject("trtllm_style", "engine variant", "TensorRT-LLM-style: ids from the rank offset, no mask"),
                Subject("sglang_style", "engine variant", "SGLang-proposal-style packed key: refuses 2**24 ids"),
                vllm,
                twin(vllm),
                classic,
                twin(classic),
            )
        ),
        Run((Subject("topk_pairs", "built-in", "k (value, id) pairs per rank"),), top_k=True, argmax="vllm_pairs"),
        Run((topk, logprobs), top_k=True, argmax="vllm"),
        Run((twin(topk), twin(logprobs)), top_k=True, argmax=FIXED_ARGMAX),
        Run((shm,), top_k=True, argmax="vllm", env=shm_env),
        Run((twin(shm),), top_k=True, argmax=FIXED_ARGMAX, env=shm_env),
    ]


def model_runs() -> tuple[list[Run], list[dict[str, Any]], dict[str, str]]:
    """Runs of every vLLM model class subject (one per head they share), the discovery record, and the proposer's
    answer for a draft class without ``get_top_tokens``."""
    from engines.vllm.subjects import corrected
    from engines.vllm.subjects import models as vllm_models
    from engines.vllm.wheel import discovery
    from sharded.impls import load_impl

    by_head: dict[tuple, list[Subject]] = {}
    for spec in vllm_models.specs():
        fn = load_impl(spec).fn
        path = spec.rpartition(".")[2]
        kind = "vLLM model class, classic path" if path == "compute_logits" else "vLLM model class"
        subject = Subject(spec, kind, fn.how, spec.partition(":")[2], vllm=True)
        key = (path == "get_top_k_tokens", tuple(sorted(fn.head.items())))
        by_head.setdefault((*key, False), []).append(subject)
        if subject.label in corrected.MODELS:  # its twin runs apart: its top-1 is compared with the corrected argmax
            by_head.setdefault((*key, True), []).append(twin(subject))
    runs = [
        Run(tuple(s), top_k=top_k, argmax=(FIXED_ARGMAX if fixed else "vllm") if top_k else "")
        for (top_k, _, fixed), s in by_head.items()
    ]
    subjects: dict[str, list[str]] = {}
    for name, subject in vllm_models.SUBJECTS.items():
        subjects.setdefault(subject.cls, []).append(name)
    coverage = getattr(vllm_models, "COVERAGE", {})
    classes = [
        {
            "name": m.name,
            "module": m.module,
            "methods": list(m.methods),
            "how": m.found,
            "confirmed": m.confirmed,
            "tested": ", ".join(f"`{s}`" for s in subjects.get(m.name, [])) or coverage.get(m.name, ""),
        }
        for m in discovery.discover()
    ]
    no_method = next((c["name"] for c in classes if not c["methods"]), None)
    said = discovery.proposer_refuses(no_method) if no_method else None
    return runs, classes, {no_method: said} if said else {}


def proposer_table(classes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's V1 proposers (:mod:`engines.vllm.wheel.proposers`: found, not listed), each asked on the class what
    the switch meets: its load, with a draft class without ``get_top_tokens`` (the first discovery found,
    ``classes``); its step pick, where it takes the step; a vocabulary of its own, where its module builds vLLM's
    ``VocabMapping``.  Empty where the wheel has no V1 proposers."""
    from engines.vllm.wheel import proposers

    no_method = next((c for c in classes if not c["methods"]), None)
    model = getattr(importlib.import_module(no_method["module"]), no_method["name"]) if no_method else None
    table = []
    for found in proposers.scan():
        source = (proposers.vllm_root() / (found.module.removeprefix("vllm.").replace(".", "/") + ".py")).read_text()
        table.append(
            {
                "name": found.name,
                "module": found.module,
                "refusal": proposers.refuses(found, model) if model else "not asked: no draft class without it",
                "steps": proposers.steps_agree(found) or "",
                "own_words": proposers.own_words_agree(found) if "VocabMapping(" in source else "",
            }
        )
    return table


def speculator_runs(classes: list[dict[str, Any]]) -> tuple[list[Run], list[dict[str, Any]]]:
    """Model Runner V2's speculators: a run for each speculator that reaches the switch, on and off, and the
    page's table of every speculator the wheel ships, with what each says at load to a draft class without
    ``get_top_tokens`` (the first such class discovery found, ``classes``), beside a probabilistic draft and beside
    adaptive verification's acceptance estimator."""
    from engines.vllm.subjects import speculators
    from engines.vllm.wheel import speculators as wheel

    kinds = {"local_draft": "vLLM speculator", "classic_draft": "vLLM speculator, classic path"}
    subjects = []
    for spec in speculators.specs():
        target = spec.partition(":")[2]
        path = target.rpartition(".")[2]
        subject = Subject(spec, kinds[path], load_impl_doc(spec), target, vllm=True)
        subjects += [subject, twin(subject)]
    no_method = next((c for c in classes if not c["methods"]), None)
    with_method = next((c for c in classes if c["methods"] and c["name"] != "LocalArgmaxMixin"), None)
    table, mine = [], speculators.SPEC
    for found in wheel.scan():
        entry = {
            "name": found.name,
            "module": found.module,
            "bases": list(found.bases),
            "methods": {m: found.owner(m) or "" for m in wheel.METHODS},
            "picks": " > ".join(found.picks),
            "tested": ", ".join(f"`{s.label}`" for s in subjects if s.spec.startswith(f"{mine}:{found.name}.")),
            "refusals": {},
        }
        if found.owner("_validate_local_argmax_reduction"):
            for label, model, config in (
                ("a draft class without get_top_tokens", no_method, {}),
                ("a probabilistic draft", with_method, {"draft_sample_method": "probabilistic"}),
            ):
                if model is not None:
                    cls = getattr(importlib.import_module(model["module"]), model["name"])
                    entry["refusals"][f"{label} (`{model['name']}`)"] = wheel.refuses(found, cls, **config)
            if with_method is not None:  # its load, through super(), beside adaptive verification's estimator
                cls = getattr(importlib.import_module(with_method["module"]), with_method["name"])
                label = f"beside the acceptance estimator, a draft without a confidence head (`{with_method['name']}`)"
                entry["refusals"][label] = wheel.refuses_beside_the_estimator(found, cls)
        table.append(entry)
    by_class: dict[str, list[Subject]] = {}  # a run per speculator: within a row's time limit, started alike
    for subject in subjects:
        by_class.setdefault(subject.label.partition(".")[0], []).append(subject)
    return [Run(tuple(group)) for group in by_class.values()], table


def load_impl_doc(spec: str) -> str:
    """What a subject runs, in its docstring's words."""
    from sharded.impls import load_impl

    return (load_impl(spec).fn.__doc__ or "").strip()


def triton_rows() -> tuple[tuple[tuple[str, str], ...], float]:
    """Where Triton's kernels run for a page's rows: natively on a GPU, else under its CPU interpreter
    (``TRITON_INTERPRET=1`` in the rows' environment, which their replay commands carry); and the collective timeout
    for that speed (the top-k/top-p kernel's 151,936-id pinned case took 5 min 45 s to replay on a 2-core machine,
    so 300 s ran out under load)."""
    import torch

    native = torch.cuda.is_available()
    return ((), 30.0) if native else ((("TRITON_INTERPRET", "1"),), 900.0)


def xpress_runs() -> list[Run]:
    """vLLM's XPress argmax kernels (0.33.0 on) on the vLLM page: one argmax run of its full-vocabulary and top-C
    paths, and the top-C path corrected (the 0.33.0 page's V15).  Natively where there is a GPU, else under Triton's
    interpreter, with a collective timeout for its speed (``vllm_xpress_argmax_chunk64`` is left out: its 2**24-id
    case takes hours under the interpreter).  A release before 0.33.0 has none of them (``Subject.since``)."""
    interpret, slow = triton_rows()
    module, kernel = "engines.vllm.xpress_argmax", "vLLM kernel"  # the recorded name: the page's keys stay
    needs = f"{module}:why_unavailable"
    subjects = (
        Subject(
            f"{module}:vllm_xpress_argmax",
            kernel,
            "XPress's fused_add_argmax_to_blk (chunks of 4096, zero refiner bias) on the gathered logits",
            "vllm_xpress_argmax",
            needs=needs,
            since="0.33.0",
        ),
        Subject(
            f"{module}:vllm_xpress_candidate_argmax",
            kernel,
            "XPress's _topk (C = 512), then fused_topc_argmax_to_blk (zero refiner bias) on the gathered logits",
            "vllm_xpress_candidate_argmax",
            needs=needs,
            since="0.33.0",
        ),
        Subject(
            f"{module}:vllm_xpress_candidate_argmax_corrected",
            kernel + CORRECTED_KIND,
            "the same kernel, its candidates the top C with ties kept by the smallest id, handed over in id order",
            "vllm_xpress_candidate_argmax (corrected)",
            corrects="vllm_xpress_candidate_argmax",
            needs=needs,
            since="0.33.0",
        ),
    )
    release = vllm_release()
    ready = tuple(s for s in subjects if shipped(s.since, release))
    return [Run(ready, env=interpret, timeout=slow)] if ready else []


def tpu_inference_runs() -> list[Run]:
    """tpu-inference's page: its sampler's classic and sharded paths on a simulated JAX mesh, each beside the same
    path with the project's corrections.  A new shape compiles in seconds, so the rows get a longer collective
    timeout."""
    needs, module, fixes = (
        "engines.tpu_inference.wheel.adapter:why_unavailable",
        "engines.tpu_inference_sampler",  # recorded names (sharded.impls.MOVED): the pages' keys stay
        "engines.tpu_inference_fixes",
    )
    kind = f"tpu-inference {TPU_INFERENCE_VERSION}"
    classic = "sample(allow_distributed_sampling=False): temperature, top-k and top-p masks, categorical over the row"
    sharded = "sample(allow_distributed_sampling=True): each shard's top 2 * MAX_TOP_K merged, where it takes the batch"
    subjects = []
    for name, note in (("tpu_inference_classic", classic), ("tpu_inference_distributed", sharded)):
        subjects.append(Subject(f"{module}:{name}", kind, note, name, needs=needs))
        subjects.append(
            Subject(
                f"{fixes}:{name}_corrected",
                kind + CORRECTED_KIND,
                "the same, with the project's top-k and top-p masks (NaN first, by logit, no probabilities of NaN)",
                f"{name} (corrected)",
                corrects=name,
                needs=needs,
            )
        )
    return [Run(tuple(subjects), sampling=True, timeout=120.0)]
