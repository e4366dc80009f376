"""vLLM's releases under test, as data: a file each (``0.33.0.toml``), read here and nowhere else.

A release's file says how it installs where it has no CPU wheel (``[install]``) and, for each of its two pages
(vLLM's, ``[vllm]``, and the samplers', ``[sampling]``), what claims the page's failures: the previous release's
causes and reasons it lists under ``failures`` (with this page's failures, an empty list where none is theirs, and
``reaches``, what this release's classes add to a cause's reach), then its own ``causes`` and ``reasons``.  The
first release's causes are code (``findings``: where they are).  The next release is a file here and its pages.
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
    return data(release)[page].get("findings") or f"{__name__}:{page}_{release.replace('.', '_')}"


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
    if "findings" in own:
        module, _, attr = own["findings"].partition(":")
        return getattr(importlib.import_module(module), attr)
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


def _item(kind: type, table: dict[str, Any]) -> Any:
    """A cause or reason from its table: lists as tuples (a consequence a table of its own), ``no_engine`` left to
    the page."""
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items() if k != "no_engine"}
    consequences = tuple(Consequence(c["title"], tuple(c["failures"])) for c in fields.get("consequences", ()))
    return kind(**fields | ({"consequences": consequences} if consequences else {}))
