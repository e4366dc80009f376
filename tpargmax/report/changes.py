"""What became of the previous vLLM release's causes in the release installed here: measured by ``tpargmax report``,
opening the page.

:func:`measure` runs in the release's environment: each of vLLM's lines a previous cause quotes as evidence is found
again in the installed wheel (its file and line now, or gone), each cause's standalone reproduction runs with this
interpreter (its exit and its last line), and :func:`lacks` records what this build of vLLM lacks
(``engines.findings.NEEDS``).  :func:`section` renders it with this run's failures, each cause still failing,
changed (it fails, and a line it quotes is gone), fixed, or not judgeable here: a pure function of the JSON.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from engines.findings import Cause, Findings, Reason
from engines.versions import VLLM_VERSION, installed_vllm
from engines.vllm.releases.baseline import causes_of, run_script
from tpargmax.report.findings import Failure, anchor, load, numbers_of

QUOTE = re.compile(r"^(?P<path>[\w./-]+\.py):(?P<line>\d+)(?:-(?P<last>\d+))?: (?P<code>.+)$")


def lacks() -> dict[str, str]:
    """What judging a cause may need that this vLLM lacks (a key of ``NEEDS``), each with the line that says why."""
    from engines.vllm.wheel.shm import cpu_kernels_missing

    why = cpu_kernels_missing()
    return {"cpu_kernels": why} if why else {}


def relocate(quote: str, root: Path) -> dict[str, Any]:
    """``quote`` (``path:line: code``, as evidence is written) found in the installed file: the line where its code
    now starts, the nearest to the old one, whitespace and line breaks aside; None where it is not found.  A quote
    that joins statements or explains them (``a, then b``) is found by its first part of at least 6 characters that
    the file has; one found within the lines it names (``path:a-b``) is where it was."""
    match = QUOTE.match(quote)
    if match is None:
        return {"quote": quote, "line": None}
    file = root / match["path"]
    lines = file.read_text(encoding="utf-8").splitlines() if file.is_file() else []
    starts, text = [], ""
    for line in lines:  # the file as one string without whitespace, with where each line starts in it
        starts.append(len(text))
        text += "".join(line.split())
    code = match["code"]
    for part in (code, *(p for p in re.split(r", (?:then |and )?", code) if len(p.strip()) >= 6)):
        want, hits = "".join(part.split()), []
        at = text.find(want)
        while want and at >= 0:
            hits.append(sum(1 for start in starts if start <= at))
            at = text.find(want, at + 1)
        if hits:
            first, last = int(match["line"]), int(match["last"] or match["line"])
            near = min(hits, key=lambda n: abs(n - first))
            return {"quote": quote, "line": first if first <= near <= last else near}
    return {"quote": quote, "line": None}


def measure(previous: Findings, root: Path, log) -> dict[str, Any]:
    """The previous release's causes and reasons against the installed wheel: the report's ``changes``."""
    import vllm

    wheel = Path(vllm.__file__).resolve().parent.parent
    causes = {}
    for item in (*previous.causes, *previous.reasons):
        entry: dict[str, Any] = {}
        if isinstance(item, Cause):
            entry["evidence"] = [relocate(quote, wheel) for quote in item.evidence if _vllms(quote)]
            if item.script:
                log(f"  {item.id}: {item.script}")
                entry["script"] = run_script(item.script, root)
        causes[item.id] = entry
    release = release_of(previous)
    return {"since": release, "release": installed_vllm(), "lacks": lacks(), "causes": causes}


def _vllms(quote: str) -> bool:
    """Whether a quoted line is vLLM's, to be found in its wheel: a cause may quote another engine's (SGLang's)."""
    match = QUOTE.match(quote)
    return match is not None and match["path"].startswith("vllm/")


def _evidence_of(change: dict[str, Any]) -> list[dict[str, Any]]:
    """A measured cause's vLLM quotes (a page measured before :func:`_vllms` holds other engines' too, never looked
    for)."""
    return [entry for entry in change.get("evidence", []) if _vllms(entry["quote"])]


STATUS = {
    "failing": "still failing",
    "changed": "changed: still failing, and a line it quotes is gone",
    "fixed": "fixed",
    "unjudged": "not judgeable here",
    "unseen": "not shown: no failure in this run, and no reproduction",
}


def status(item: Cause | Reason, change: dict[str, Any], lacking: dict[str, str], failing: bool) -> tuple[str, str]:
    """(a key of STATUS, the evidence for it) for one previous cause or reason."""
    if item.needs and item.needs in lacking:
        return "unjudged", lacking[item.needs]  # the line says what it needs
    script = change.get("script") or {}
    gone = any(e["line"] is None for e in _evidence_of(change))
    if failing or script.get("exit") == 1:
        return ("changed" if gone else "failing"), ""
    if script.get("exit") == 0:
        return "fixed", "its reproduction exits 0 and no failure of this run is its"
    if script:
        return "unjudged", script.get("line", "")
    return "unseen", ""


def _judged(item: Cause | Reason, change: dict[str, Any], lacking: dict[str, str], failing: bool) -> tuple[str, str]:
    """A cause's cells: what became of it (with why, unless it is still failing), and what its reproduction did."""
    key, why = status(item, change, lacking, failing)
    script = change.get("script")
    ran = "—" if not script else f"exit {script['exit']}" if script["exit"] is not None else script["line"]
    return STATUS[key] + (f" ({why})" if why and key != "failing" else ""), ran


def _evidence(change: dict[str, Any]) -> str:
    """The quoted lines where they are now: ``file:line`` (with the old line where it moved), or gone."""
    out = []
    for entry in _evidence_of(change):
        match = QUOTE.match(entry["quote"])
        name = match["path"].rpartition("/")[2]
        if entry["line"] is None:
            out.append(f"gone: `{name}:{match['line']}`")
        else:
            moved = f" (was {match['line']})" if str(entry["line"]) != match["line"] else ""
            out.append(f"`{name}:{entry['line']}`{moved}")
    return ", ".join(out) or "—"


def section(data: dict[str, Any], failures: list[Failure], findings: Findings, previous: Findings) -> list[str]:
    """The page's opening: what became of each of the previous release's causes and reasons, and what is new."""
    changes = data["changes"]
    since, release = changes["since"], changes.get("release") or release_of(findings)
    originals = [f for f in failures if not f[1].get("corrects")]
    corrected = [f for f in failures if f[1].get("corrects")]
    now = {item.id: item for item in (*findings.causes, *findings.reasons)}
    out = [
        f"## What changed since vLLM {since}",
        "",
        f"Each of {since}'s causes and reasons judged again with {release}: this run's failures it claims, its "
        f"standalone reproduction run with {release} (exit 1 while the defect is there, 0 once it is gone, 2 where it "
        f"cannot be judged here), and each line it quotes as evidence found again in {release}'s wheel (its line now, "
        f"and {since}'s where it moved).",
        "",
        f"| cause | in {release} | failures | reproduction | evidence in {release} |",
        "|---|---|---|---|---|",
    ]
    for item in (*previous.causes, *previous.reasons):
        change = changes["causes"].get(item.id, {})
        mine = now.get(item.id, item)
        listed, fixed = numbers_of(originals, mine.all_failures), numbers_of(corrected, mine.all_failures)
        text, ran = _judged(item, change, changes["lacks"], bool(listed or fixed))  # a correction's own fault too
        link = f"[{item.id}](#{anchor(mine)})" if item.id in now else item.id
        cell = "; ".join(filter(None, (", ".join(listed), "corrected rows: " + ", ".join(fixed) if fixed else "")))
        out.append(f"| {link} {item.title} | {text} | {cell or '—'} | {ran} | {_evidence(change)} |")
    out.append("")
    before = {item.id: item for item in (*previous.causes, *previous.reasons)}
    for item in findings.causes:
        if item.id not in before:
            out.append(
                f"- **New on this page** (not among {since}'s causes): [{item.id}](#{anchor(item)}) {item.title}."
            )
        elif item.reaches != before[item.id].reaches:
            out.append(
                f"- **{item.id} reaches more in {release}:** {item.reaches.rpartition(f'in {release} also ')[2]}."
            )
    return out + [""]


def release_of(findings: Findings) -> str:
    """The vLLM release a page's findings are of: the last word of a release's ("vLLM 0.33.0", "the engines'
    samplers with vLLM 0.33.0"), else the default release (the samplers' page names none)."""
    last = findings.engine.rpartition(" ")[2]
    return last if last[:1].isdigit() else VLLM_VERSION


def previous_of(findings: Findings) -> Findings | None:
    """The previous release's findings a page's findings name, or None."""
    return load({"findings": findings.previous}) if findings.previous else None


def baseline_section(data: dict[str, Any], failures: list[Failure], findings: Findings) -> list[str]:
    """A build no page lists (``data["baseline"]``): each of the release's causes and reasons judged with it, by what
    this run's failures it claimed (``--baseline``: ``engines/vllm/releases/baseline.py``), its reproduction and its
    quoted lines; then what no known cause claims, new in this build."""
    since, release = data["baseline"]["since"], data["baseline"]["release"]
    changes, met = data["changes"], _met(data)
    out = [
        f"## What changed since vLLM {since}",
        "",
        f"vLLM {release} is a build no page lists: its run was judged against vLLM {since}'s causes and reasons "
        f"and the listed releases' own runs (`--baseline`). A failure one of them claims did not fail its cell, and "
        f"the search went on past it; it is counted here. Each cause no failure of this run is claimed by is judged "
        f"by its standalone reproduction run with {release} (exit 1 while the defect is there, 0 once it is gone, 2 "
        f"where it cannot be judged here), and each line it quotes is found again in {release}'s code.",
        "",
        f"| cause | in {release} | met in this run | reproduction | evidence in {release} |",
        "|---|---|---|---|---|",
    ]
    for item in (*findings.causes, *findings.reasons):
        change = changes["causes"].get(item.id, {})
        seen = met.pop(item.id, [])
        text, ran = _judged(item, change, changes["lacks"], bool(seen))
        out.append(f"| {item.id} {item.title} | {text} | {'; '.join(seen) or '—'} | {ran} | {_evidence(change)} |")
    out.append("")
    for claim, seen in met.items():  # the releases' own runs: failures known without a cause read
        out.append(f"- Known from {claim} (its cause not read): {'; '.join(seen)}.")
    new = [number for number, row, _, _ in failures if not row.get("corrects")]
    out.append(
        f"- **New in {release}:** {', '.join(new)}: no known cause claims them."
        if new
        else f"- **New in {release}:** none."
    )
    return out + [""]


def _met(data: dict[str, Any]) -> dict[str, list[str]]:
    """Each known cause (or own run) this run's original rows met: ``subject test xN`` entries."""
    counts: dict[str, dict[str, int]] = {}
    for row in data["rows"]:
        for test, cell in [] if row.get("corrects") else row["cells"].items():
            for note in cell.get("known", []):
                claim = note["cause"]
                for name in causes_of(claim):
                    where = counts.setdefault(name, {})
                    where[f"`{row['name']}` {test}"] = where.get(f"`{row['name']}` {test}", 0) + note["count"]
    return {name: [f"{where} x{n}" for where, n in seen.items()] for name, seen in counts.items()}
