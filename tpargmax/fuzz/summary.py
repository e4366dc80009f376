"""``tpargmax fuzz-summary``: one fuzz campaign's workers merged into one summary, each find listed once.

A worker is a directory holding a fuzz log (``*.jsonl``, as ``tpargmax fuzz --log`` writes it); the repro files
under it (any depth) are its finds.  A find is a (test, implementation, backend, rule): two workers that shrink
the same bug to different cases still make one find, with both files listed.  Repro files are read as data
(JSON), never replayed or imported.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPRO_FORMAT = "tpargmax-repro/"


@dataclass
class Worker:
    """One worker's results: its log's rounds and its repro files."""

    where: Path
    rounds: list[dict[str, Any]] = field(default_factory=list)
    repros: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)

    @property
    def name(self) -> str:
        shards = sorted({str(r.get("shard", "1/1")) for r in self.rounds})
        hosts = sorted({str(r["host"]) for r in self.rounds if r.get("host")})
        return f"{'+'.join(shards) or '?'} on {', '.join(hosts) or '?'}"


def _loads(text: str) -> Any:
    """The JSON in ``text``, or None: a line or a file that is not JSON is not the suite's."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _json(path: Path) -> Any:
    try:
        return _loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def collect(dirs: list[Path]) -> list[Worker]:
    """The workers under ``dirs``: each directory with a fuzz log, and the repro files beneath it."""
    workers: dict[Path, Worker] = {}
    for top in dirs:
        if not top.is_dir():
            raise ValueError(f"fuzz-summary: {top} is not a directory")
        for log in sorted(top.rglob("*.jsonl")):
            rounds = [_loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
            rounds = [r for r in rounds if isinstance(r, dict) and "round" in r]
            if rounds:
                workers.setdefault(log.parent, Worker(log.parent)).rounds.extend(rounds)
    if not workers:
        raise ValueError(
            f"fuzz-summary: no fuzz log (*.jsonl from tpargmax fuzz --log) under {', '.join(map(str, dirs))}"
        )
    for top in dirs:
        for path in sorted(top.rglob("*.json")):
            record = _json(path)
            if not (isinstance(record, dict) and str(record.get("format", "")).startswith(REPRO_FORMAT)):
                continue
            owner = max((w for w in workers if w in path.parents), key=lambda w: len(w.parts), default=None)
            workers.setdefault(owner or top, Worker(owner or top)).repros.append((path, record))
    return list(workers.values())


def finds(workers: list[Worker]) -> dict[tuple[str, str, str, str], list[tuple[Worker, Path]]]:
    """Each distinct find, with the workers and files that reported it."""
    out: dict[tuple[str, str, str, str], list[tuple[Worker, Path]]] = {}
    for worker in workers:
        for path, record in worker.repros:
            key = tuple(str(record.get(name, "?")) for name in ("test", "impl", "backend", "rule"))
            out.setdefault(key, []).append((worker, path))
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def summary(workers: list[Worker]) -> str:
    """The campaign as Markdown: finds, examples per property, and each worker's pace."""
    found = finds(workers)
    rounds = [r for w in workers for r in w.rounds]
    examples = sum(int(r.get("examples", 0)) for r in rounds)
    lines = [
        "# Fuzz summary",
        "",
        f"{len(workers)} worker(s), {len(rounds)} round(s), {examples} examples; {len(found)} distinct find(s).",
        "",
        "## Finds",
        "",
    ]
    if found:
        lines += ["| test | implementation | backend | rule | found by | repro files |", "|---|---|---|---|---|---|"]
        for (test, impl, backend, rule), where in sorted(found.items()):
            by = ", ".join(sorted({w.name for w, _ in where}))
            files = "<br>".join(sorted({f"`{p.name}`" for _, p in where}))
            lines.append(f"| {test} | `{impl}` | {backend} | {_cell(rule)} | {by} | {files} |")
    else:
        lines.append("None.")
    failing = sorted({t for r in rounds for t in r.get("failing_tests", [])})
    reported = {(test, impl) for test, impl, _, _ in found}
    bare = [t for t in failing if not any(f"::{test}[" in t and impl in t for test, impl in reported)]
    if bare:
        lines += ["", "Failing tests without a repro file (errors, or a find still shrinking at the deadline):", ""]
        lines += [f"- `{t}`" for t in bare]
    per_test: Counter[str] = Counter()
    for r in rounds:
        per_test.update({str(t): int(n) for t, n in (r.get("tests") or {}).items()})
    lines += ["", "## Examples per property", ""]
    if per_test:
        lines += ["| property | examples |", "|---|---|"]
        lines += [f"| `{t}` | {n} |" for t, n in sorted(per_test.items())]
    else:
        lines.append("Not in these logs (written by a tpargmax older than its per-test counts).")
    lines += [
        "",
        "## Workers",
        "",
        "| worker | rounds | examples | seconds | examples/s | finds |",
        "|---|---|---|---|---|---|",
    ]
    for w in sorted(workers, key=lambda w: w.name):
        n = sum(int(r.get("examples", 0)) for r in w.rounds)
        seconds = sum(float(r.get("seconds", 0)) for r in w.rounds)
        pace = f"{n / seconds:.1f}" if seconds > 0 else "-"
        lines.append(f"| {w.name} | {len(w.rounds)} | {n} | {seconds:.0f} | {pace} | {len(w.repros)} |")
    return "\n".join(lines) + "\n"


def copy_repros(workers: list[Worker], out: Path) -> int:
    """Copy every distinct repro file (by name: case, implementation and property) and its side file to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    copied: set[str] = set()
    for worker in workers:
        for path, record in worker.repros:
            if path.name in copied:
                continue
            copied.add(path.name)
            shutil.copy2(path, out / path.name)
            side = record.get("tensors_file")
            if isinstance(side, str) and Path(side).name == side and (path.parent / side).is_file():
                shutil.copy2(path.parent / side, out / side)
    return len(copied)


def main(args: argparse.Namespace) -> int:
    try:
        workers = collect([Path(d) for d in args.dirs])
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    text = summary(workers)
    if args.repro_out:
        copy_repros(workers, Path(args.repro_out))
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0
