"""The root-cause part of a conformance page: which defect each failure comes from, and what its correction removes.

Pure functions of the report's JSON and the engine's findings (``engines/<engine>/findings.py``), so the page
still renders on any machine, without the engine.  A corrected row (``row["corrects"]``, the original's name)
proves a correction: for each failure a cause claims, the corrected row's cell of that property passes, or fails
only with failures that other causes or reasons claim.
"""

from __future__ import annotations

import importlib
from typing import Any

from engines.findings import SEVERITIES, Cause, Findings, Reason, failure_key
from sharded.impls import MOVED, MOVED_FINDINGS

Failure = tuple[str, dict[str, Any], str, dict[str, Any]]  # (number, row, test, failure), as the page numbers them
Claims = dict[str, Cause | Reason]  # failure key -> what claims it: Findings.claims()


def load(data: dict[str, Any]) -> Findings | None:
    """The findings the report names (``data["findings"]``, ``MODULE:ATTR``), or None; a module that moved since
    the report was saved is found where it lives now (``sharded.impls.MOVED``, ``MOVED_FINDINGS``)."""
    spec = data.get("findings")
    if not spec:
        return None
    module, _, attr = MOVED_FINDINGS.get(spec, spec).partition(":")
    return getattr(importlib.import_module(MOVED.get(module, module)), attr)


def anchor(item: Cause | Reason) -> str:
    """The slug of the item's heading, ``### V1``."""
    return item.id.lower()


def numbers_of(failures: list[Failure], keys: tuple[str, ...]) -> list[str]:
    """The page's numbers of these failures, in page order."""
    wanted = set(keys)
    return [number for number, row, test, fail in failures if failure_key(row, test, fail) in wanted]


def removes(data: dict[str, Any], failures: list[Failure], claims: Claims, cause: Cause) -> tuple[list, list]:
    """(failures the correction removes, failures it leaves), by the corrected rows' cells."""
    corrected = {row["corrects"]: row for row in data["rows"] if row.get("corrects")}
    gone, left = [], []
    for number, row, test, fail in failures:
        if row.get("corrects") or claims.get(failure_key(row, test, fail)) is not cause:
            continue  # a corrected row's own failures are what it leaves, counted from its original's
        fixed = corrected.get(row["name"])
        cell = fixed["cells"].get(test) if fixed else None
        if cell is None:
            left.append(number)
            continue
        # the corrected cell still fails with this cause's failure, or with one nothing claims yet
        own = [f for f in cell.get("failures", []) if claims.get(failure_key(fixed, test, f), cause) is cause]
        (left if cell["outcome"] == "failed" and (own or not cell.get("failures")) else gone).append(number)
    return gone, left


def _correction(data: dict[str, Any], failures: list[Failure], claims: Claims, cause: Cause) -> str:
    if not cause.correction:
        return "none yet"
    if not numbers_of(failures, cause.all_failures):
        return "no failure of this run to remove"
    gone, left = removes(data, failures, claims, cause)
    return f"removes {', '.join(gone) or 'none'}" + (f"; leaves {', '.join(left)}" if left else "")


def section(data: dict[str, Any], failures: list[Failure], findings: Findings, claims: Claims) -> list[str]:
    """The root causes, as the page opens: a short table, then each cause and reason in full.  Counts and lists
    are of the original rows' failures; what the corrected rows still fail is in the correction column, and the
    corrected rows' failures a cause claims are listed as theirs (the defect left in place by the other causes'
    corrections).  A cause with no failure of the original rows and no reproduction reads "not shown"."""
    proof, failures = failures, [f for f in failures if not f[1].get("corrects")]
    keys = {failure_key(r, t, f) for _, r, t, f in failures}
    kinds = [type(claims.get(failure_key(r, t, f))) for n, r, t, f in failures]
    by_cause, by_reason = kinds.count(Cause), kinds.count(Reason)
    corrections = {cause.id: _correction(data, proof, claims, cause) for cause in findings.causes}
    out = [
        "## Root causes",
        "",
        f"{len(failures)} failures: {by_cause} come from {len(findings.causes)} defects in {findings.engine}'s code "
        f"(the causes below; a failure that follows from a defect through other code is listed as its consequence), "
        f"{by_reason} are by design or outside the contract ([reasons](#by-design-or-outside-the-contract)). "
        "Each cause is shown by failures of this run, by a standalone reproduction (a script that needs only the "
        "engine: exit 1 while the defect is there, 0 once it is gone, and 2, with one line saying what is missing, "
        "where it cannot be judged on the machine it runs on), or by both; a cause shown by neither says so. A "
        "correction is the project's own code patched over the defective method, run through the same properties "
        "as the corrected row beside the original.",
        "",
        "| cause | severity | failures | reaches | reproduction | correction |",
        "|---|---|---|---|---|---|",
    ]
    for cause in findings.causes:
        direct = numbers_of(failures, cause.failures)
        follow = numbers_of(failures, tuple(k for c in cause.consequences for k in c.failures))
        fixed = on_corrected_rows(proof, cause)
        listed = "; ".join(
            filter(
                None,
                (
                    ", ".join(direct),
                    "follows: " + ", ".join(follow) if follow else "",
                    "corrected rows: " + ", ".join(fixed) if fixed else "",
                ),
            )
        )
        listed = (listed or BY_SCRIPT) if shown(cause, keys) else "; ".join(filter(None, (NOT_SHOWN, listed)))
        name = cause.script.rsplit("/", 1)[-1]
        script = f"[{name}]({_relative(cause.script, findings.page)})" if cause.script else "—"
        out.append(
            f"| [{cause.id}](#{anchor(cause)}) {cause.title} | {SEVERITIES[cause.severity]} | {listed} | "
            f"{cause.reaches} | {script} | {corrections[cause.id]} |"
        )
    out.append("")
    for cause in findings.causes:
        out += [f"### {cause.id}", "", f"**{cause.title}**", "", f"- **Where:** `{cause.where}`"]
        out += [f"- **Severity:** {SEVERITIES[cause.severity]}. **Reaches:** {cause.reaches}"]
        out += ["- **Evidence:**"] + [f"  - `{line}`" for line in cause.evidence]
        fixed = on_corrected_rows(proof, cause)
        listed = ", ".join(numbers_of(failures, cause.failures)) or "—"
        listed = BY_SCRIPT if not (numbers_of(failures, cause.all_failures) or fixed) else listed
        listed += f" (on the corrected rows: {', '.join(fixed)})" if fixed else ""
        listed = listed if shown(cause, keys) else f"{NOT_SHOWN}; {listed}"
        out += [f"- **Why:** {cause.why}", f"- **Failures:** {listed}"]
        for consequence in (c for c in cause.consequences if c.failures):  # one this page's run showed
            listed = ", ".join(numbers_of(failures, consequence.failures))
            out.append(f"- **Consequence:** {consequence.title}: {listed}")
        if cause.script:
            out.append(f"- **Reproduction:** `python {cause.script}`")
        if cause.correction:
            out.append(f"- **Correction:** {cause.correction} ({corrections[cause.id]})")
        out.append("")
    out += ["## By design or outside the contract", ""]
    for reason in findings.reasons:
        out += [f"### {reason.id}", "", f"**{reason.title}**", "", reason.why, ""]
        listed = ", ".join(numbers_of(failures, reason.failures))
        fixed = on_corrected_rows(proof, reason)
        listed += f" (on the corrected rows: {', '.join(fixed)})" if fixed else ""
        out += [f"Failures: {listed.strip() or 'none on this page'}.", ""]
    return out


BY_SCRIPT = "none in this run: its reproduction shows it"
NOT_SHOWN = "not shown: no failure of the engine's own rows in this run, and no reproduction"


def on_corrected_rows(failures: list[Failure], cause: Cause | Reason) -> list[str]:
    """The numbers of the corrected rows' failures that ``cause`` claims: the defect still there under the
    corrections of the others (a NaN the corrected reduction still drops, exactly k candidates)."""
    return numbers_of([f for f in failures if f[1].get("corrects")], cause.all_failures)


def shown(cause: Cause, keys: set[str]) -> bool:
    """Whether the page shows ``cause``: a failure of the engine's own code in the run (``keys``: the original rows'
    failures; a corrected row runs the project's code too) or a standalone reproduction."""
    return bool(cause.script) or any(key in keys for key in cause.all_failures)


def cause_line(claims: Claims, row: dict[str, Any], test: str, fail: dict[str, Any]) -> str:
    """The line a failure's entry gets: what claims it, linked."""
    key = failure_key(row, test, fail)
    item = claims.get(key)
    if item is None:
        return "- **Cause:** not yet assigned"
    if isinstance(item, Reason):
        return f"- **By design:** [{item.id}](#{anchor(item)}), {item.title}"
    consequence = next((c for c in item.consequences if key in c.failures), None)
    via = f", through: {consequence.title}" if consequence else ""
    return f"- **Cause:** [{item.id}](#{anchor(item)}), {item.title}{via}"


def _relative(path: str, page: str) -> str:
    """A checkout path as a link from the page's folder."""
    prefix = page.rpartition("/")[0] + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path
