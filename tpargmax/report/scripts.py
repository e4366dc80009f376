"""Write each vLLM cause's standalone reproduction script from its shrunk case: ``python -m tpargmax.report.scripts``.

The templates and the choice of case per cause are ``engines.vllm.causes.scripts``'s; the titles are the causes' own
(each release's findings, ``engines.vllm.releases``); the tensors come from the committed repro file
(``properties.repro.records.load``), or from the case's seed where the failure has none, written out in the
script so that it needs nothing of this project.  ``--check`` exits 1 where a committed script is not what this
would write.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from string import Template

import torch

from engines.versions import VLLM_VERSION, vllm_page, vllm_releases, vllm_repro
from engines.vllm.causes import scripts as templates
from engines.vllm.causes.script_catalog import HAND_WRITTEN, SCRIPTS, Script
from engines.vllm.releases import findings
from engines.vllm.releases import scripts as release_scripts
from engines.vllm.wheel import hardware, shm
from properties.cases.case import Case
from properties.cases.tensors import build
from properties.repro.records import load
from tpargmax import ROOT

WIDTH = 120  # the project's line length: the scripts pass its ruff check


@dataclass(frozen=True)
class Source:
    """A script's case: its description, its sizes and its tensors (rows by global id, base then added)."""

    text: str  # where it comes from, for the docstring
    case: Case | None
    tp: int
    k: int | None
    hidden: torch.Tensor | None
    weight: torch.Tensor | None
    bias: torch.Tensor | None


def source(script: Script, root: Path = ROOT) -> Source:
    """The case of ``script``: its repro file's tensors, or its case's, or (``data``) only its sizes."""
    if script.repro:
        path = f"{vllm_repro(script.release)}/{script.repro}.json"
        record, inputs = load(root / path)
        k = record.get("extra", {}).get("k", script.k)
        text = f"Case: {record['case']}{f', k={k}' if k else ''}, from {path}."
        return Source(text, inputs.case, inputs.case.tp, k, inputs.hidden, inputs.weight, inputs.bias)
    if script.data:
        text = f"Case: a head of {script.case['vocab']} ids, hidden size 1, tp={script.case['tp']}."
        return Source(text, None, script.case["tp"], script.k, None, None, None)
    case = Case(**script.case)
    inputs = build(case)
    text = f"Case: {case!r}{f', k={script.k}' if script.k else ''}, built from its seed as the property builds it."
    return Source(text, case, case.tp, script.k, inputs.hidden, inputs.weight, inputs.bias)


def number(x: float) -> str:
    """A float32 value as Python source that reads back to the same bits: an int where it is one."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return str(int(x)) if x == int(x) and abs(x) < 2**53 and not (x == 0 and math.copysign(1, x) < 0) else repr(x)


def _lines(items: str, indent: str = "    ") -> str:
    """Comma-separated items as lines within the line length."""
    return "".join(f"{indent}{line}\n" for line in textwrap.wrap(items, WIDTH - len(indent), break_on_hyphens=False))


def _items(t: torch.Tensor) -> str:
    if t.ndim == 1:
        return ", ".join(number(x) for x in t.tolist())
    return ", ".join("[" + ", ".join(number(x) for x in row) + "]" for row in t.tolist())


def tensor_text(target: str, t: torch.Tensor, comment: str) -> str:
    """``target = torch.tensor([...])`` with every value exact: one line where it fits, else wrapped lines."""
    dtype = str(t.dtype).removeprefix("torch.")
    one = f"{target} = torch.tensor([{_items(t)}], dtype=torch.{dtype})  # {comment}"
    if len(one) <= WIDTH:
        return one + "\n"
    return f"{target} = torch.tensor([  # {comment}\n{_lines(_items(t) + ',')}], dtype=torch.{dtype})\n"


def data_text(script: Script, src: Source) -> str:
    """The script's tensors as source: hidden rows kept, head rows kept (the others zero), the bias."""
    if script.data:
        return script.data
    hidden = src.hidden if script.rows is None else src.hidden[list(script.rows)]
    out = tensor_text("H", hidden, "hidden states [batch, hidden]")
    weight, dtype = src.weight, str(src.weight.dtype).removeprefix("torch.")
    if script.keep is None:
        out += tensor_text("W", weight, "the head's rows by id: base ids, then added ids")
    else:
        keep = list(script.keep)
        out += f"W = torch.zeros({weight.shape[0]}, {weight.shape[1]}, dtype=torch.{dtype})  # the head's rows by id\n"
        out += tensor_text(f"W[{keep}]", weight[keep], "the rows that decide; every other row is zero")
    if src.bias is None:
        out += "B = None  # the head's bias by id\n"
    else:
        if script.keep is not None:
            raise ValueError(f"{script.cause}: a kept-rows head with a bias is not written")
        out += tensor_text("B", src.bias, "the head's bias by id")
    kept = [hidden, weight if script.keep is None else weight[list(script.keep)], src.bias]
    names = [
        n
        for n, test in (("inf", torch.isinf), ("nan", torch.isnan))
        if any(t is not None and bool(test(t).any()) for t in kept)
    ]
    if names:
        values = ", ".join(f'float("{n}")' for n in names)
        out = f"{', '.join(names)} = {values}\n" + out
    return out


def _sizes(script: Script, src: Source, tp: int) -> str:
    if src.case is None:
        vocab, added, logits_vocab, scale, soft_cap = script.case["vocab"], 0, script.case["vocab"], 1.0, None
    else:
        c = src.case
        vocab, added, logits_vocab, scale, soft_cap = (
            c.vocab,
            c.added,
            c.logits_vocabulary,
            c.scale,
            c.soft_cap,
        )
    return f"{tp}, 300, {vocab}, {added}, {logits_vocab}, {float(scale)!r}, {soft_cap!r}, {src.k!r}"


def _docstring_lines(text: str) -> str:
    return "\n".join(textwrap.wrap(text, WIDTH - 3, break_on_hyphens=False, break_long_words=False))


def reductions(script: Script, src: Source) -> str:
    """What the script keeps of the case, in words (empty where it keeps all of it)."""
    parts = []
    if script.tp is not None and script.tp != src.tp:
        parts.append(f"tp={script.tp} (the case ran at tp={src.tp}; tp={script.tp} returns the same)")
    if script.rows is not None:
        parts.append(f"hidden row{'s' if len(script.rows) > 1 else ''} {', '.join(map(str, script.rows))} only")
    if script.keep is not None:
        parts.append(f"head rows {', '.join(map(str, script.keep))} only, every other row zero")
    return f" Kept: {'; '.join(parts)}." if parts else ""


def render(script: Script, root: Path = ROOT) -> str:
    """The text of ``script``'s file."""
    cause = next(c for c in findings(script.release, "vllm").causes if c.id == script.cause)
    kind = templates.KINDS[script.kind]
    src = source(script, root)
    tp = script.tp or src.tp
    if kind.shared_memory:
        ident = "os.path.basename(os.path.dirname(store))"
        ident_comment = "# one name on every rank, as vLLM's CPU worker sets it: the shared-memory CPU communicator"
    else:
        ident = 'f"{store}-{r}"'
        ident_comment = "# a name per rank: no shared-memory communicator; collectives go through gloo"
    unjudged = templates.SHM_UNJUDGED if kind.shared_memory else ""
    unjudged += templates.LATER_UNJUDGED if script.release != VLLM_VERSION else ""
    unjudged += kind.unjudged
    runs_with, not_installed = templates.who(script.release)
    intro = Template(templates.INTRO).substitute(
        who=runs_with, stem=script.stem, tp=tp, call=kind.call, unjudged=unjudged
    )
    paragraphs = [f"{cause.id}: {cause.title}.", intro, src.text + reductions(script, src), script.note]
    doc = "\n\n".join(_docstring_lines(text) for text in paragraphs if text)
    return templates.SCRIPT.substitute(
        doc=doc,
        sizes=_sizes(script, src, tp),
        constants=f"{script.constants}\n" if script.constants else "",
        data=data_text(script, src),
        expected=kind.expected,
        actual=kind.actual,
        ident=ident,
        ident_comment=ident_comment,
        agree=kind.agree,
        unjudged=templates.UNJUDGED,
        not_installed=not_installed,
        hardware=inspect.getsource(hardware.without_triton_cpu).rstrip("\n"),
        **preconditions(kind, script.release),
    )


def preconditions(kind: templates.Kind, release: str = VLLM_VERSION) -> dict[str, str]:
    """The template's checks of what the script needs: for the shared-memory kind, :mod:`engines.vllm.wheel.shm`'s
    functions written out (the one place that knows when vLLM starts that communicator), called before the ranks
    start and, in each rank, after vLLM's answer; for a later release's cause, that the installed vLLM holds
    the files its class is in (``templates.TOO_OLD``)."""
    if release != VLLM_VERSION:
        if not kind.needs:
            raise ValueError(f"a later release's kind names the vLLM files it imports (Kind.needs): {kind.call}")
        return {
            "static": "too_old()",
            "functions": templates.TOO_OLD.substitute(needs=json.dumps(list(kind.needs)), since=release),
            "after": "",
        }
    if not kind.shared_memory:
        return {"static": "None", "functions": "", "after": ""}
    functions = "".join(f"\n\n{inspect.getsource(f)}" for f in shm.WRITTEN_OUT)
    after = (
        "        why = shm_not_in_use()  # the communicator vLLM gathered through for that answer\n"
        "        if why is not None:\n"
        "            result = UNJUDGED + why\n"
    )
    return {"static": "shm_unavailable()", "functions": functions, "after": after}


def path_of(script: Script, root: Path = ROOT) -> Path:
    return root / vllm_page(script.release) / f"{script.stem}.py"


def every_script() -> tuple[Script, ...]:
    """The first release's scripts (``engines.vllm.causes.script_catalog``), then each later release's, from its
    file (``[[vllm.scripts]]``)."""
    return SCRIPTS + release_scripts()


def scripts() -> list[Script]:
    """One script a cause, in the causes' order (a later release's new causes after the first's), but for the causes
    whose reproduction is written by hand (``HAND_WRITTEN``); a ValueError names a cause without one, or a script
    without a cause."""
    every = every_script()
    by_cause = {script.cause: script for script in every}
    every_cause = (c.id for release in vllm_releases() for c in findings(release, "vllm").causes)
    ids = [i for i in dict.fromkeys(every_cause) if i not in HAND_WRITTEN]
    missing, unknown = [i for i in ids if i not in by_cause], sorted(set(by_cause) - set(ids))
    if missing or unknown or len(by_cause) != len(every):
        where = "script_catalog.SCRIPTS and the releases' [[vllm.scripts]]"
        raise ValueError(f"{where}: no script for {missing}, no cause for {unknown}")
    return [by_cause[i] for i in ids]


def write(out_dir: str | Path | None = None, root: Path = ROOT) -> list[Path]:
    """Write every cause's script into ``out_dir`` (default: beside its release's page, ``docs/conformance/
    vllm-RELEASE``)."""
    written = []
    for script in scripts():
        path = Path(out_dir) / f"{script.stem}.py" if out_dir is not None else path_of(script, root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(script, root), encoding="utf-8")
        written.append(path)
    return written


def stale(root: Path = ROOT) -> list[str]:
    """The committed scripts that differ from what :func:`write` would write, or are missing."""
    out = []
    for script in scripts():
        path = path_of(script, root)
        if not path.is_file() or path.read_text(encoding="utf-8") != render(script, root):
            out.append(str(path.relative_to(root)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpargmax.report.scripts", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where a committed script differs; write nothing")
    parser.add_argument("--out", default=None, help=f"the folder to write into (default: {templates.DIRECTORY})")
    args = parser.parse_args(argv)
    if args.check:
        differ = stale()
        for path in differ:
            print(f"{path}: differs from what `python -m tpargmax.report.scripts` writes", file=sys.stderr)
        return 1 if differ else 0
    for path in write(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
