"""vLLM's releases under test, as data: a file each (``0.33.0.toml``), read here and nowhere else.

A release's file says how it installs where it has no CPU wheel (``[install]``) and, for each of its two pages
(vLLM's, ``[vllm]``, and the samplers', ``[sampling]``), what claims the page's failures: the previous release's
causes and reasons it lists under ``failures`` (with this page's failures, an empty list where none is theirs, and
``reaches``, what this release's classes add to a cause's reach), then its own ``causes`` and ``reasons``, and under
``scripts`` how each of its own causes' standalone reproduction is written (:func:`scripts`).  The first release's
causes are code (``findings``: where they are).  The next release is a file here and its pages.
"""

from __future__ import annotations

import importlib
import tomllib
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from engines.findings import Cause, Consequence, EndToEnd, Findings, Reason
from engines.versions import sampling_page, vllm_page, vllm_releases
from engines.vllm.causes.script_catalog import Script

HERE = Path(__file__).parent
PAGES = {"vllm": ("vLLM {}", vllm_page), "sampling": ("the engines' samplers with vLLM {}", sampling_page)}


@cache
def data(release: str) -> dict[str, Any]:
    """The release's file, parsed; ValueError naming the releases there are where it has none."""
    path = HERE / f"{release}.toml"
    if not path.is_file():
        raise ValueError(f"vLLM {release} is not a release under test ({', '.join(vllm_releases())})")
    return tomllib.loads(path.read_text(encoding="utf-8"))


def findings_spec(release: str, page: str = "vllm") -> str:
    """The findings of the release's page as a report names them (``MODULE:ATTR``)."""
    own = data(release)[page]
    if "findings" in own and not own.get("failures"):  # code alone: its own name
        return own["findings"]
    return f"{__name__}:{page}_{release.replace('.', '_')}"


def __getattr__(name: str) -> Findings:
    """``vllm_0_33_0``, ``sampling_0_33_0``: the findings of a release's page, as :func:`findings_spec` names them."""
    page, _, release = name.partition("_")
    if page not in PAGES or not release:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return findings(release.replace("_", "."), page)


@cache
def findings(release: str, page: str) -> Findings:
    """What claims the failures of the release's page (``page``: ``vllm`` or ``sampling``); a ValueError naming the
    release's file where it lacks a table or a key, or a cause's table has one a cause has not."""
    try:
        return _findings(release, page)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"engines/vllm/releases/{release}.toml, [{page}]: {type(exc).__name__}: {exc}") from exc


def _findings(release: str, page: str) -> Findings:
    own = data(release)[page]
    if "findings" in own:  # the first release's causes are code; its file may claim more failures for them
        module, _, attr = own["findings"].partition(":")
        return _claiming_more(getattr(importlib.import_module(module), attr), own.get("failures", {}))
    previous = data(release)["previous"]
    before = findings(previous, page)
    claims = {key: tuple(map(tuple, parts)) for key, parts in own.get("failures", {}).items()}
    reaches, why = own.get("reaches", {}), own.get("why", {})

    def carried(cause: Cause) -> Cause:
        more = reaches.get(cause.id)
        return cause.claiming(claims[cause.id], f"{cause.reaches}; in {release} also {more}" if more else "")

    causes = [carried(c) for c in before.causes if c.id in claims] + [_item(Cause, c) for c in own.get("causes", ())]
    reasons = [replace(r, failures=claims[r.id][0], why=why.get(r.id, r.why)) for r in before.reasons if r.id in claims]
    no_engine = {c["id"]: c.get("no_engine", own.get("no_engine")) for c in own.get("causes", ())}
    title, path = PAGES[page]
    return Findings(
        title.format(release),
        path(release),
        tuple(causes),
        tuple(reasons) + tuple(_item(Reason, r) for r in own.get("reasons", ())),
        tuple(EndToEnd(c.id, why=no_engine.get(c.id, own["no_engine"])) for c in causes) if "no_engine" in own else (),
        previous=findings_spec(previous, page),
    )


def _claiming_more(found: Findings, more: dict[str, list[list[str]]]) -> Findings:
    """``found`` with each cause's or reason's failures extended by ``more`` (its id -> its direct failures, then each
    consequence's, as ``failures`` reads): rows added to a page after its causes were written."""
    if not more:
        return found
    parts = {key: tuple(map(tuple, lists)) for key, lists in more.items()}
    unknown = set(parts) - {item.id for item in (*found.causes, *found.reasons)}
    if unknown:
        raise KeyError(f"no cause or reason {sorted(unknown)} to claim failures for")

    def cause(c: Cause) -> Cause:
        if c.id not in parts:
            return c
        had = (c.failures, *(x.failures for x in c.consequences))
        extra = parts[c.id] + ((),) * (len(had) - len(parts[c.id]))
        return c.claiming(tuple(a + b for a, b in zip(had, extra, strict=True)))

    def reason(r: Reason) -> Reason:
        return replace(r, failures=r.failures + parts[r.id][0]) if r.id in parts else r

    return replace(found, causes=tuple(map(cause, found.causes)), reasons=tuple(map(reason, found.reasons)))


def _item(kind: type, table: dict[str, Any]) -> Any:
    """A cause or reason from its table: lists as tuples (a consequence a table of its own), ``no_engine`` left to
    the page."""
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items() if k != "no_engine"}
    consequences = tuple(Consequence(c["title"], tuple(c["failures"])) for c in fields.get("consequences", ()))
    return kind(**fields | ({"consequences": consequences} if consequences else {}))


def scripts() -> tuple[Script, ...]:
    """Each listed release's own causes' scripts (``[[vllm.scripts]]``: a :class:`Script`'s fields, lists as tuples),
    oldest release first; a ValueError naming the file where a table has a key a script has not."""
    out = []
    for release in vllm_releases():
        for n, table in enumerate(data(release).get("vllm", {}).get("scripts", ())):
            fields = {k: _tuples(v) for k, v in table.items()}
            try:
                out.append(Script(**fields, release=release))
            except TypeError as exc:
                raise ValueError(f"engines/vllm/releases/{release}.toml, [[vllm.scripts]] #{n + 1}: {exc}") from exc
    return tuple(out)


def _tuples(value: Any) -> Any:
    """TOML's arrays as tuples, inside tables too (a case's ``specials``)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return {k: _tuples(v) for k, v in value.items()} if isinstance(value, dict) else value
