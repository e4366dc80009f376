"""A :class:`Case` read from someone else's text or file: parsed as data, never run as code.

``Case(...)`` strings are pasted from bug reports and CI logs, and repro files
arrive as artifacts, so both are untrusted.  A string is parsed with the
standard library's ``ast`` and ``ast.literal_eval``: only ``Case(name=literal,
...)`` with numbers, strings, ``None`` and tuples of those is accepted, and the
``Case`` then checks its own fields.  Every refusal is a ``ValueError`` whose
message is one line.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import MISSING, fields

from properties.cases.case import Case, shown

MAX_TEXT = 4096  # a printed Case is a few hundred characters
FIELDS = tuple(f.name for f in fields(Case))
LITERALS = (int, float, str, type(None))  # bool is an int


def _literal(value: object) -> bool:
    return isinstance(value, LITERALS) or (isinstance(value, tuple) and all(_literal(v) for v in value))


def _check_literal(name: str, value: object) -> None:
    if not _literal(value):
        raise ValueError(f"Case field {name!r} must be a number, string, None or tuple, got {shown(value)}")


def case_from_fields(given: Mapping[str, object]) -> Case:
    """A Case from field values (a repro file's ``case_fields``; JSON lists are taken as tuples)."""
    if not isinstance(given, Mapping):
        raise ValueError(f"case fields must be a mapping of field names to values, got {type(given).__name__}")
    unknown = [name for name in given if name not in FIELDS]
    if unknown:
        raise ValueError(f"unknown Case field {shown(unknown[0])}; the fields are {', '.join(FIELDS)}")
    values = {name: tuple(v) if isinstance(v, list) else v for name, v in given.items()}
    for name, value in values.items():
        _check_literal(name, value)
    missing = [f.name for f in fields(Case) if f.name not in values and f.default is MISSING]
    if missing:
        raise ValueError(f"Case field {missing[0]!r} is missing")
    return Case(**values)


def parse_keywords(text: str, name: str, max_text: int = MAX_TEXT) -> dict[str, object]:
    """Read a ``NAME(field=literal, ...)`` repr from a failure message: the fields' values, nothing evaluated."""
    if len(text) > max_text:
        raise ValueError(f"a {name} string is at most {max_text} characters, got {len(text)}")
    try:
        call = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(
            f"not a {name}(...) expression: {type(exc).__name__}: {shown(getattr(exc, 'msg', exc))}"
        ) from None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == name):
        raise ValueError(f"expected {name}(name=value, ...), got {shown(ast.unparse(call))}")
    if call.args or any(kw.arg is None for kw in call.keywords):
        raise ValueError(f"a {name} string names every field: {name}(name=value, ...), no positional or ** arguments")
    given: dict[str, object] = {}
    for kw in call.keywords:
        if kw.arg in given:
            raise ValueError(f"{name} field {kw.arg!r} is given twice")
        try:
            given[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise ValueError(
                f"{name} field {kw.arg!r} must be a literal (number, string, None or tuple), "
                f"got {shown(ast.unparse(kw.value))}"
            ) from None
        if not _literal(given[kw.arg]):  # before lists become tuples
            what = shown(given[kw.arg])
            raise ValueError(f"{name} field {kw.arg!r} must be a number, string, None or tuple, got {what}")
    return given


def parse_case(text: str) -> Case:
    """Read a ``Case(...)`` repr as printed in failure messages: keyword literals only, nothing evaluated."""
    return case_from_fields(parse_keywords(text, "Case"))
