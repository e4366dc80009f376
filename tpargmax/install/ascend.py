"""``tpargmax install-ascend``: vllm-ascend's released source into ``.engines/`` (never a venv), for its reduce
sampling under test.

The registry serves vllm-ascend 0.23.0.post1 as an sdist alone, whose ``setup.py`` asks ``npu-smi`` for the chip
before pip can even read its metadata; and nothing of it is imported here (its modules import ``torch_npu``).  So
the sdist is fetched by its pinned address, checked against its pinned SHA-256, and its Python files alone are
extracted (tar's ``data`` filter: no links out, no absolute paths); nothing of it runs.  ``--from PATH`` records a
vllm-ascend checkout instead, so a contributor judges their change before review.  Either way the subjects read
``.engines/vllm-ascend.json`` (:mod:`engines.ascend.wheel.source`).  About 15 MB fetched, 4 MB kept.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

from engines.ascend.wheel.source import HOME, RECORD, SDIST, SDIST_SHA256, SDIST_URL, missing_files
from engines.versions import ASCEND_VERSION

TOP = f"vllm_ascend-{ASCEND_VERSION}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(target: Path) -> None:
    """The sdist into ``target``, unless a copy with the pinned hash is there; ValueError on another hash."""
    if target.is_file() and _sha256(target) == SDIST_SHA256:
        print(f"{target}: already here, SHA-256 {SDIST_SHA256}")
        return
    partial = target.with_suffix(".part")
    print(f"fetching {SDIST_URL}", flush=True)
    with urllib.request.urlopen(SDIST_URL, timeout=180) as response, partial.open("wb") as out:  # noqa: S310
        shutil.copyfileobj(response, out)
    got = _sha256(partial)
    if got != SDIST_SHA256:
        partial.unlink()
        raise ValueError(f"{SDIST_URL}: SHA-256 {got}, not the pinned {SDIST_SHA256}")
    partial.replace(target)


def _extract(sdist: Path, into: Path) -> Path:
    """The sdist's Python files and PKG-INFO under ``into``; its version checked."""
    root = into / TOP
    shutil.rmtree(root, ignore_errors=True)
    with tarfile.open(sdist) as archive:
        members = [
            m
            for m in archive.getmembers()
            if m.isfile()
            and (m.name == f"{TOP}/PKG-INFO" or (m.name.startswith(f"{TOP}/vllm_ascend/") and m.name.endswith(".py")))
        ]
        archive.extractall(into, members=members, filter="data")
    found = _pkg_version(root)
    if found != ASCEND_VERSION:
        raise ValueError(f"{sdist}: PKG-INFO says version {found}, not {ASCEND_VERSION}")
    return root


def _pkg_version(root: Path) -> str | None:
    """The ``Version:`` of ``root``'s PKG-INFO, else ``__version__`` in ``vllm_ascend/_version.py``, read as text."""
    for rel, pattern in (
        ("PKG-INFO", r"^Version:\s*(\S+)"),
        ("vllm_ascend/_version.py", r"__version__\s*=\s*['\"]([^'\"]+)"),
    ):
        try:
            match = re.search(pattern, (root / rel).read_text(errors="replace"), re.MULTILINE)
        except OSError:
            continue
        if match:
            return match.group(1)
    return None


def _record(root: Path, version: str, origin: str) -> None:
    RECORD.write_text(json.dumps({"root": str(root), "version": version, "origin": origin}, indent=1) + "\n")
    print(f"vllm-ascend {version} ({origin}) at {root}; recorded in {RECORD}")


def install_ascend(args: argparse.Namespace) -> int:
    source = getattr(args, "source", None)
    if args.dry_run:
        if source:
            print(f"would record the vllm-ascend checkout {Path(source).resolve()} in {RECORD}")
        else:
            print(
                f"would fetch {SDIST_URL} (SHA-256 {SDIST_SHA256}) into {HOME}, extract its Python files, record them"
            )
        return 0
    HOME.mkdir(exist_ok=True)
    try:
        if source:
            root = Path(source).resolve()
            missing = missing_files(root)
            if missing:
                raise ValueError(f"--from {source}: not a vllm-ascend checkout (no {', '.join(missing)})")
            _record(root, _pkg_version(root) or "checkout", "checkout")
            return 0
        sdist = HOME / SDIST
        _fetch(sdist)
        root = _extract(sdist, HOME)
        missing = missing_files(root)
        if missing:
            raise ValueError(f"{sdist} lacks {', '.join(missing)}")
        _record(root, ASCEND_VERSION, "sdist")
    except (OSError, ValueError, tarfile.TarError) as error:
        print(f"tpargmax install-ascend: {error}", file=sys.stderr)
        return 1
    return 0
