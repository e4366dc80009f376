"""A published page of ``tpargmax report`` (its Markdown, its JSON, its repro files and scripts), read for the tests
that check it: :mod:`tests.test_published_pages` for every engine's page, and each engine's own test module for what
needs the engine (its scripts' verdicts, its replays)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.suite import ROOT


class Published:
    def __init__(self, page: str) -> None:
        self.page = page  # the page's path from the checkout's root, without its ending (engines/versions.py)
        self.path = ROOT / f"{page}.md"
        self.data: dict[str, Any] = json.loads(self.path.with_suffix(".json").read_text(encoding="utf-8"))
        # every failure with a case (and so a repro file): (row, failure)
        self.failures = [
            (row, fail)
            for row in self.data["rows"]
            for cell in row["cells"].values()
            for fail in cell["failures"]
            if fail["case"]
        ]
        self.scripts: list[Path] = sorted((ROOT / page).glob("*.py"))


WAITED = re.compile(r"within [0-9.]+s")


def assert_still_failing(failures: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Every failure's repro file, replayed by ``tpargmax repro``, still fails with the rule it recorded."""
    files = sorted({fail["repro_file"] for _, fail in failures})
    command = [sys.executable, "-m", "tpargmax", "repro", *files, "--collective-timeout", "120"]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 1, out.stdout + out.stderr
    for _, fail in failures:  # a lost rank's rule names the collective timeout it waited, which the replay sets
        rule = WAITED.sub("within ?s", fail["rule"])
        assert f"STILL FAILING: [{rule}]" in WAITED.sub("within ?s", out.stdout), fail["repro_file"]
