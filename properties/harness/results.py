"""Each test's outcome as data (``--results-json``): what ``tpargmax report`` builds its matrix from.

A failure keeps its rule, minimal case, replay command, repro file and the lines that say what was
expected and what came back; a skip keeps its reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from properties.failures import recorded_replay

RESULTS = pytest.StashKey[list]()
KNOWN = "tpargmax known cause"  # a failure a known cause claims (--baseline): a user property of the test's report


def failure(exc: BaseException, repro_file: str | None) -> dict[str, Any]:
    """One failure: a property's (its rule, case and replay from the failure's own record) or any other
    exception's (its first line)."""
    lines = str(exc).splitlines() or [type(exc).__name__]
    cut = next((i for i, line in enumerate(lines) if line.strip().lower().startswith("traceback")), len(lines))
    lines = lines[:cut]  # a rank's traceback stays in pytest's report
    repro = getattr(exc, "repro", None)
    e2e = bool(repro) and repro.get("kind") == "e2e"  # an engine's end to end: a scenario, replayed from its file
    case = repr(repro["inputs"].case) if repro and not e2e else str(repro["scenario"]) if e2e else None
    return {
        "rule": repro["rule"] if repro else _short(f"{type(exc).__name__}: {lines[0]}"),
        "property": repro["property"] if repro else None,
        "case": case,
        "replay": f"tpargmax repro {repro_file}" if e2e else recorded_replay(repro) if repro else None,
        "repro_file": repro_file,
        "details": [line.strip() for line in lines[1:] if not line.strip().startswith(("case:", "replay:"))][:8],
    }


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def record(item: pytest.Item, report: pytest.TestReport, errors: list[tuple[BaseException, str | None]]) -> None:
    """Keep one test's outcome (its call, or the setup that skipped or broke it) with each error and its repro
    file, when ``--results-json`` asked for them."""
    results = item.config.stash.get(RESULTS, None)
    if results is None or not (report.when == "call" or report.outcome != "passed"):
        return
    callspec = getattr(item, "callspec", None)
    results.append(
        {
            "nodeid": item.nodeid,
            "test": item.originalname,
            "params": {k: str(v) for k, v in callspec.params.items()} if callspec else {},
            "outcome": report.outcome,
            "skip_reason": report.longrepr[2].removeprefix("Skipped: ") if report.skipped else None,
            "failures": [failure(exc, path) for exc, path in errors],
            "known": [known_of(json.loads(value)) for name, value in report.user_properties if name == KNOWN],
        }
    )


def known_of(note: dict[str, Any]) -> dict[str, Any]:
    """What a page keeps of a failure a known cause claimed: the claim, its rule, how often, the first case."""
    return {key: note[key] for key in ("cause", "rule", "count", "replay")}


def save(config: pytest.Config, path: str) -> None:
    Path(path).write_text(json.dumps(config.stash[RESULTS], indent=1) + "\n", encoding="utf-8")
