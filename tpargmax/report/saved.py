"""A saved report's JSON (``tpargmax report --render`` and ``--merge``), read as untrusted input.

A report travels like a repro file: committed, attached, downloaded.  Rendering it runs no code of its own: every
field the page reads is checked for its kind before any is used, and the findings it names (a module the page
imports for its root causes) must be ones the project ships.  Anything else is a ``ValueError`` with one line that
names the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engines.versions import vllm_releases
from engines.vllm.releases import PAGES, findings_spec
from properties.cases.case import shown
from properties.repro.reader import one_line, read_json
from sharded.impls import MOVED, MOVED_FINDINGS

MAX_REPORT_BYTES = 64 * 2**20  # the committed vLLM report is about 1 MiB
# the findings a page may name: the project's own, each listed vLLM release's (``engines.vllm.releases``), then the
# names reports recorded before their modules moved (loaded through ``sharded.impls.MOVED`` and ``MOVED_FINDINGS``)
TPU_FINDINGS = "engines.tpu_inference.causes.findings:FINDINGS"
SGLANG_FINDINGS = "engines.sglang.causes.findings:FINDINGS"
ASCEND_FINDINGS = "engines.ascend.causes.findings:FINDINGS"
FINDINGS = (
    ASCEND_FINDINGS,
    TPU_FINDINGS,
    SGLANG_FINDINGS,
    *(findings_spec(release, page) for release in vllm_releases() for page in PAGES),
    *MOVED_FINDINGS,
    *(f"{old}:FINDINGS" for old, new in MOVED.items() if new.endswith("findings") or new == "engines.sampling_page"),
)
OUTCOMES = ("passed", "failed", "skipped")
OPTIONS = ("--impl", "--topk-impl", "--sampling-impl")


class Text:
    """One printable line (``None`` too where ``optional``)."""

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional


class OneOf:
    def __init__(self, *choices: object) -> None:
        self.choices = choices


class Map:
    """A JSON object whose keys are text and whose values are all ``value``."""

    def __init__(self, value: object) -> None:
        self.value = value


class Nullable:
    """``value``, or null."""

    def __init__(self, value: object) -> None:
        self.value = value


LINE, MAYBE = Text(), Text(optional=True)
FAILURE = {"rule": LINE, "?details": [LINE], "?case": MAYBE, "?repro_file": MAYBE, "?property": MAYBE, "?replay": MAYBE}
KNOWN = {"cause": LINE, "rule": LINE, "count": int, "replay": MAYBE}  # a failure a known cause claimed (--baseline)
CELL = {"outcome": OneOf(*OUTCOMES), "failures": [FAILURE], "skip_reason": MAYBE, "?known": [KNOWN]}
ROW = {
    "name": LINE,
    "kind": LINE,
    "note": LINE,
    "option": [LINE],
    "?env": Map(LINE),
    "?corrects": LINE,
    "?skipped": LINE,
    "cells": Map(CELL),
}
CLASS = {"name": LINE, "module": LINE, "methods": [LINE], "how": LINE, "confirmed": LINE, "tested": LINE}
SPECULATOR = {
    "name": LINE,
    "module": LINE,
    "bases": [LINE],
    "methods": Map(Text()),
    "picks": Text(),
    "tested": Text(),
    "refusals": Map(LINE),
}
PROPOSER = {"name": LINE, "module": LINE, "refusal": LINE, "steps": Text(), "own_words": Text()}
SCRIPT = {"exit": int, "output": [LINE]}
END_TO_END = {"command": LINE, "cells": Map(Map(CELL)), "scripts": Map(SCRIPT)}
CHANGE = {"?evidence": [{"quote": LINE, "line": Nullable(int)}], "?script": {"exit": Nullable(int), "line": Text()}}
CHANGES = {"since": LINE, "release": MAYBE, "lacks": Map(LINE), "causes": Map(CHANGE)}  # tpargmax.report.changes
REPORT = {
    "title": LINE,
    "command": LINE,
    "?commands": [LINE],
    "?findings": OneOf(*FINDINGS),
    "versions": Map(LINE),
    "budget": {"examples": int, "backend": LINE, "tps": [int], "profile": LINE, "?gloo_share": float},
    "?classes": [CLASS],
    "?refusal": Map(LINE),
    "?speculators": [SPECULATOR],
    "?proposers": [PROPOSER],
    "rows": [ROW],
    "?end_to_end": END_TO_END,
    "?changes": CHANGES,
    "?baseline": {"since": LINE, "release": LINE},  # a build no page lists, judged against the known causes
}


def read_report(path: str | Path) -> dict[str, Any]:
    """The report saved at ``path``; a ``ValueError`` of one line, naming the file, for anything the page cannot use."""
    path = Path(path)
    try:
        data = read_json(path, MAX_REPORT_BYTES, "a report")
        _check(data, REPORT, "the report")
        for n, row in enumerate(data["rows"]):
            if len(row["option"]) != 2 or row["option"][0] not in OPTIONS:
                raise ValueError(f"rows[{n}].option must be [{' or '.join(OPTIONS)}, SPEC], got {row['option']!r}")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {' '.join(str(exc).split())}") from None
    return data


def _check(value: object, spec: object, where: str) -> None:
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a JSON object, got {_kind(value)}")
        for key, inner in spec.items():
            name = key.removeprefix("?")
            if name in value:
                _check(value[name], inner, f"{where}.{name}" if where != "the report" else name)
            elif not key.startswith("?"):
                raise ValueError(f"{where} has no {name!r}")
    elif isinstance(spec, list):
        if not isinstance(value, list):
            raise ValueError(f"{where} must be a JSON array, got {_kind(value)}")
        for n, item in enumerate(value):
            _check(item, spec[0], f"{where}[{n}]")
    elif isinstance(spec, Map):
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a JSON object, got {_kind(value)}")
        for key, item in value.items():
            _check(key, LINE, f"a key of {where}")
            _check(item, spec.value, f"{where}.{key}")
    elif isinstance(spec, Nullable):
        if value is not None:
            _check(value, spec.value, where)
    elif isinstance(spec, OneOf):
        if value not in spec.choices or isinstance(value, bool):
            raise ValueError(f"{where} must be one of {spec.choices}, got {shown(value)}")
    elif isinstance(spec, Text):
        if not (value is None and spec.optional) and not one_line(value):
            raise ValueError(f"{where} must be one printable line of text, got {shown(value)}")
    elif not isinstance(value, (int, float) if spec is float else spec) or isinstance(value, bool):
        raise ValueError(f"{where} must be a JSON {'number' if spec is float else 'integer'}, got {shown(value)}")


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "text", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )
