"""Known causes as a baseline: a build of vLLM judged against what the listed releases' pages already claim.

A contributor's build fails where its release did (V1, V3...); what matters to them is what is *new*.  A failure is
a known cause's where a listed release's page (``engines.vllm.releases``) has a failure of the same subject (its option,
spec and environment), the same property and the same rule (:func:`rule_class`: the rule without its case's numbers;
for an exception on valid input, its type) that the cause claims.  The rule is the mechanism as the diagnosis named
it (``properties.argmax.diagnosis``, ``faults``), so a tie sent to the higher rank is never taken for V1's
misplaced added id, and a subject or property where the release never failed claims nothing.

A page's run stops at a property's first failure, so the pages alone leave out much of what a release fails, and a
rule is too coarse a mark for those: vLLM 0.32.0's misnumbered added ids also read as a tie sent to the higher rank,
the very rule a new merge bug would break.  So the baseline's own run on a listed release, searching past every
failure (``--baseline --baseline-record``), records each failing example exactly: its property, subjects, case (its
replay command) and answer (:func:`answer`: the rule and what came back).  A build's failure on the same case with
the same answer is that release's own defect, known without naming which cause (no one has read them one by one);
the same case answered otherwise is new.  ``--hypothesis-profile ci`` is derandomised: a build draws the cases its
base drew, as long as both answer alike.

A known cause no failure of a run is claimed by is judged by its standalone reproduction: ``fixed`` only where that
runs and exits 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines.findings import Cause, Reason, failure_key
from engines.versions import installed_vllm, release_key, vllm_page, vllm_releases
from engines.vllm.releases import findings as release_findings

ROOT = Path(__file__).resolve().parents[3]
SCRIPT_TIMEOUT = 600.0  # a script's own limit is 300 s for its ranks; vLLM's import comes before it
OPTIONS = {"impl": "--impl", "topk_impl": "--topk-impl", "sampling_impl": "--sampling-impl"}
Subject = tuple[str, str, tuple[tuple[str, str], ...]]  # (option, spec, environment): a page's row, a run's subject


MODELLED = "modelled: "  # a claim by a model of the release's local path (known_defects): the defects it kept follow


ITSELF = "the release's local path itself (its model with every known cause corrected fails alike)"


def causes_of(claim: str) -> list[str]:
    """The known causes a claim names: a page's cause, or the defects a model kept (:data:`ITSELF` where it kept
    none)."""
    if claim == f"{MODELLED}none":
        return [ITSELF]
    return claim.removeprefix(MODELLED).split("+") if claim.startswith(MODELLED) else [claim]


def answer(seen: dict[str, Any], impl: str = "") -> str:
    """A failing example's answer, as a short digest: its rule and the lines that say what came back, without the
    implementation's name (``impl``) or where its ranks ran, so that a model of the release answers alike; for an
    exception, its type and message alone (its traceback is the implementation's own)."""
    rule = re.sub(r"RemoteError: rank \d+ of \d+ raised ", "", seen["rule"])
    raised = rule.startswith(("raised on valid input", "bad input"))  # what a bad input returned does not matter
    lines = [] if raised else [line for line in seen.get("details", []) if not line.startswith("implementation:")]
    text = "\n".join([rule, *lines])
    return hashlib.sha256((text.replace(impl, "IMPL") if impl else text).encode()).hexdigest()[:16]


def example_key(test: str, subjects: list, replay: str | None) -> str:
    """A failing example, as a run's record keys it: its property, its subjects and its case (the replay command)."""
    return json.dumps([test, [list(s) for s in subjects], replay or ""])


def rule_class(rule: str) -> str:
    """A failure's rule without what its case alone decides: ``added id mapped to the wrong global id`` (not which
    id), ``raised on valid input: IndexError`` (not which index), an assertion without the subject's name."""
    text = rule.removeprefix("AssertionError: ")
    if text.startswith("bad input"):  # its kind, however the subject handled it: accepted, raised, unclear
        kind = re.match(r"bad input (?:\(([^)]*)\)|accepted: (.*))", text)
        return f"bad input: {next(k for k in kind.groups() if k)}" if kind else text
    if text.startswith("raised on valid input"):  # on a process group behind ``RemoteError: rank 0 of 2 raised``
        raised = [n for n in re.findall(r"\b([A-Z]\w*(?:Error|Exception|Exit))\b", text) if n != "RemoteError"]
        return f"raised on valid input: {raised[0] if raised else 'an exception'}"
    text = re.sub(r"^[\w.:\[\]-]+: ", "", text)  # an assertion's subject (``vllm_topk: k=7 ...``)
    head, _, rest = text.partition(": ")
    text = head if re.search(r"\d", rest) else text  # what follows names the case (``added id 1015 sits at...``)
    text = re.split(r"; ", text, maxsplit=1)[0]
    text = re.sub(r"[\[(][\d, ]*[\])]", "(…)", text)  # ``tie at (0, 1)``, ``rows gave [3, 3, 3]``
    return re.sub(r"\b\d+\b", "N", text).strip()[:100]


def subject_of(row: dict[str, Any]) -> Subject:
    """A page row's subject as a run names it."""
    option, spec = row["option"]
    return option, spec, tuple(sorted(row.get("env", {}).items()))


def own_run(release: str) -> str:
    """Where a listed release's own baseline run is recorded, from the checkout's root."""
    return f"{vllm_page(release)}-baseline.json"


def releases_before(version: str | None) -> tuple[str, ...]:
    """The listed releases a build's baseline holds, latest first: those at or before it (every one for a build
    past them or none installed)."""
    if version is None:
        return tuple(reversed(vllm_releases()))
    key = release_key(version)
    return tuple(r for r in reversed(vllm_releases()) if release_key(r) <= key) or (vllm_releases()[0],)


def judged_against(version: str | None) -> str | None:
    """The listed release a build no page lists is judged against (the latest at or before it); None for a listed
    release, or where no vLLM is installed."""
    return None if version is None or version in vllm_releases() else releases_before(version)[0]


@dataclass
class Baseline:
    """What the listed releases' pages claim, by subject, property and rule; and each cause as its latest page
    has it (its reproduction, its title)."""

    releases: tuple[str, ...]
    claims: dict[tuple[Subject, str, str], str] = field(default_factory=dict)  # (subject, test, rule) -> cause id
    answers: dict[str, tuple[str, str]] = field(default_factory=dict)  # example_key -> (answer, whose run)
    causes: dict[str, Cause | Reason] = field(default_factory=dict)
    subjects: dict[str, set[Subject]] = field(default_factory=dict)  # cause id -> the subjects it failed on

    @classmethod
    def of(cls, releases: tuple[str, ...], root: Path = ROOT, runs: tuple[Path, ...] = ()) -> Baseline:
        """The releases' pages and own runs, and ``runs`` (other builds' runs ``--baseline-record`` wrote)."""
        base = cls(releases)
        for release in releases:  # latest first: a later page's claim stands
            findings = release_findings(release, "vllm")
            claims = findings.claims()
            for item in (*findings.causes, *findings.reasons):
                base.causes.setdefault(item.id, item)
            data = json.loads((root / f"{vllm_page(release)}.json").read_text(encoding="utf-8"))
            for row in data["rows"]:
                for test, cell in row.get("cells", {}).items():
                    for fail in cell.get("failures", []):
                        item = claims.get(failure_key(row, test, fail))
                        if item is None:
                            continue
                        key = (subject_of(row), test, rule_class(fail["rule"]))
                        base.claims.setdefault(key, item.id)
                        base.subjects.setdefault(item.id, set()).add(key[0])
        owns = ((root / own_run(r), f"vLLM {r}'s own run") for r in releases)
        for path, name in (*owns, *((path, f"the run recorded in {path.name}") for path in runs)):
            if path.is_file():
                run = json.loads(path.read_text(encoding="utf-8"))
                for key, digest in run["answers"].items():
                    base.answers.setdefault(key, (digest, name))
                for option, spec, env, test, rule in run.get("rules", []):  # bad input, by its kind
                    base.claims.setdefault(((option, spec, tuple(sorted(env.items()))), test, rule), name)
        return base

    def claim(self, subjects: list[Subject], test: str, seen: dict[str, Any]) -> str | None:
        """What claims a failure (``seen``: its rule, details and replay) of one of ``subjects`` in ``test``: a
        recorded run that failed the same example with the same answer, else a page's cause that failed the
        subject and property with the same rule; None where neither does: new."""
        digest, whose = self.answers.get(example_key(test, subjects, seen.get("replay")), ("", ""))
        if digest and digest in {answer(seen, spec) for _, spec, _ in subjects}:
            return whose
        wanted = rule_class(seen["rule"])
        return next((c for s in subjects if (c := self.claims.get((s, test, wanted))) is not None), None)


def judge_unmet(item: Cause | Reason, root: Path = ROOT) -> tuple[str, str]:
    """A known cause no failure of the run is claimed by: (``fixed``, ``still failing``, ``not judged``) and why,
    by its standalone reproduction run with this interpreter (exit 1 while the defect is there, 0 once it is gone,
    2 where it cannot be judged here)."""
    script = getattr(item, "script", "")
    if not script:
        return "not judged", "no failure of this run is its, and it has no standalone reproduction"
    done = run_script(script, root)
    if done["exit"] == 0:
        return "fixed", f"no failure of this run is its, and its reproduction `{script}` exits 0"
    if done["exit"] == 1:
        return "still failing", f"not met by this run's examples; its reproduction `{script}` exits 1"
    return "not judged", f"`{script}`: exit {done['exit']}: {done['line']}"


def run_script(script: str, root: Path = ROOT) -> dict[str, Any]:
    """A cause's standalone reproduction, run with this interpreter: its exit and its last line.  A script whose
    vLLM code is a Triton kernel runs under Triton's CPU interpreter where there is no CUDA GPU, as it asks (its
    exit 2 says so otherwise), as the report's rows of those kernels do."""
    env = dict(os.environ)
    if "TRITON_INTERPRET" in (root / script).read_text(encoding="utf-8"):
        import torch

        env.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")
    try:
        done = subprocess.run(
            [sys.executable, script], cwd=root, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT, env=env
        )
    except subprocess.TimeoutExpired:
        return {"exit": None, "line": f"no answer within {SCRIPT_TIMEOUT:g} s"}
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return {"exit": done.returncode, "line": (lines[-1] if lines else "")[:300]}


def baseline_for(choice: str) -> Baseline:
    """``--baseline``'s argument: ``auto`` (the releases at or before the installed build), a listed release, or a
    build's run that ``--baseline-record`` wrote (with the releases at or before that build)."""
    if choice == "auto":
        return Baseline.of(releases_before(installed_vllm()))
    if choice in vllm_releases():
        return Baseline.of(releases_before(choice))
    path = Path(choice)
    if not path.is_file():
        raise ValueError(f"--baseline {choice}: a listed vLLM release ({', '.join(vllm_releases())}), auto, or a file")
    try:
        release = json.loads(path.read_text(encoding="utf-8"))["release"]
        return Baseline.of(releases_before(release), runs=(path,))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"--baseline {choice}: not a run --baseline-record wrote ({type(exc).__name__}: {exc})"
        ) from None
