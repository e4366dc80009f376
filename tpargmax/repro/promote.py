"""``tpargmax promote FILE``: turn a repro file into a patch that pins its case as an ``@example``.

The patch adds the case to ``EDGE_CASES`` in ``properties/strategies.py``, which
every token-exact and output-contract property runs first; ``git apply`` it.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import hashlib
import re
import sys
from pathlib import Path

from properties.cases.case import Case
from properties.repro import records as repro
from tpargmax import ROOT

TARGET = Path("properties") / "strategies.py"


def patch_for(record: dict, case: Case) -> str:
    """The patch, written from the parsed case (never the record's own text) and one-line, printable words."""
    lines = (ROOT / TARGET).read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("EDGE_CASES = ("))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(")"))
    day = record.get("created", "")[:10]
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", day):
        day = "undated"
    pinned = f"    {case!r},  # promoted: {record['rule']} ({record['impl']}, {day})\n"
    if pinned.split("#")[0] in "".join(lines[start:end]):
        return ""
    new = [*lines[:end], pinned, *lines[end:]]
    return "".join(difflib.unified_diff(lines, new, f"a/{TARGET}", f"b/{TARGET}"))


def promote(args: argparse.Namespace) -> int:
    try:
        record, inputs = repro.load(args.file)
    except repro.DamagedRepro as exc:
        print(f"tpargmax promote: {exc}", file=sys.stderr)
        return 2
    text = patch_for(record, inputs.case)
    if not text:
        print(f"{args.file}: its case is already pinned in {TARGET}")
        return 0
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    out = Path(args.out) / f"{datetime.date.today().isoformat()}--{digest}.patch"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}; pin the case with: git apply {out}")
    return 0
