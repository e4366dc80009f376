"""Just enough YAML to read a GitHub Actions workflow (block mappings and sequences, scalars, ``|`` blocks).

The project has no YAML dependency; anything outside this subset is an error, never a guess.
"""

from __future__ import annotations

import json
import re

_KEY = re.compile(r"^([A-Za-z0-9_.\-/${}\[\] ]+):(?:\s+(.*))?$")


def _scalar(text: str) -> object:
    text = text.strip()
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if text[:1] in "\"'":
        if text[-1:] != text[0]:
            raise ValueError(f"unterminated string: {text}")
        return json.loads(text) if text[0] == '"' else text[1:-1].replace("''", "'")
    if text[:1] in "{[&*!|>" or ": " in text:
        raise ValueError(f"outside the supported subset: {text}")
    return {"true": True, "false": False, "null": None}.get(text, text)


def _lines(source: str) -> list[tuple[int, str]]:
    out = []
    for raw in source.splitlines():
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError("tabs in indentation")
        stripped = raw.strip()
        if stripped and not stripped.startswith("#"):
            out.append((len(raw) - len(raw.lstrip()), raw.rstrip()))
    return out


def loads(source: str) -> object:
    lines = _lines(source)
    value, end = _block(lines, 0, lines[0][0] if lines else 0)
    if end != len(lines):
        raise ValueError(f"unexpected indentation at: {lines[end][1]}")
    return value


def _block(lines, i, indent):
    if lines[i][1].strip().startswith("- "):
        return _sequence(lines, i, indent)
    return _mapping(lines, i, indent)


def _sequence(lines, i, indent):
    items = []
    while i < len(lines) and lines[i][0] == indent and lines[i][1].strip().startswith("- "):
        rest = lines[i][1].strip()[2:]
        if _KEY.match(rest):  # "- key: value" opens a mapping indented by the dash
            lines = [*lines[:i], (indent + 2, " " * (indent + 2) + rest), *lines[i + 1 :]]
            value, i = _mapping(lines, i, indent + 2)
        else:
            value, i = _scalar(rest), i + 1
        items.append(value)
    return items, i


def _mapping(lines, i, indent):
    out = {}
    while i < len(lines) and lines[i][0] == indent:
        match = _KEY.match(lines[i][1].strip())
        if not match:
            raise ValueError(f"expected 'key: value' at: {lines[i][1]}")
        key, rest = match.group(1), (match.group(2) or "").strip()
        i += 1
        if rest == "|":
            block = []
            while i < len(lines) and lines[i][0] > indent:
                block.append(lines[i][1].strip())
                i += 1
            out[key] = "\n".join(block) + "\n"
        elif rest:
            out[key] = _scalar(rest)
        elif i < len(lines) and lines[i][0] > indent:
            out[key], i = _block(lines, i, lines[i][0])
        else:
            out[key] = None
    return out, i
