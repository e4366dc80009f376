"""A saved report is input too: ``tpargmax report --render`` (and ``--merge``) check it as a repro file is checked.

The page imports the findings the report names, so a report naming another module must be refused before
anything is imported; every other damage is exit 2 with one line that names the field, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.versions import VLLM_PAGE, VLLM_VERSION
from tests.test_hostile_input import one_line
from tpargmax.cli import main as tpargmax
from tpargmax.report.saved import FINDINGS

SAVED = Path(__file__).resolve().parent.parent / f"{VLLM_PAGE}.json"


def damaged(path: Path, change) -> Path:
    data = json.loads(SAVED.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data))
    return path


def first_failure(data: dict) -> dict:
    return next(f for row in data["rows"] for cell in row["cells"].values() for f in cell["failures"])


DAMAGE = {  # how -> (the change, words of the one line)
    "findings naming another module": (
        lambda d: d.update(findings="marker_findings:FINDINGS"),
        f"findings must be one of {FINDINGS}, got 'marker_findings:FINDINGS'",
    ),
    "no rows": (lambda d: d.pop("rows"), "the report has no 'rows'"),
    "rows not a list": (lambda d: d.update(rows={}), "rows must be a JSON array, got an object"),
    "a rule that is a number": (
        lambda d: first_failure(d).update(rule=5),
        "failures[0].rule must be one printable line of text, got 5",
    ),
    "a rule over two lines": (
        lambda d: first_failure(d).update(rule="x\n# injected"),
        "must be one printable line of text",
    ),
    "an unknown outcome": (
        lambda d: next(iter(d["rows"][0]["cells"].values())).update(outcome="green"),
        "outcome must be one of ('passed', 'failed', 'skipped'), got 'green'",
    ),
    "an option that is no option": (
        lambda d: d["rows"][0].update(option=["--evil", "x"]),
        "rows[0].option must be [--impl or --topk-impl or --sampling-impl, SPEC]",
    ),
    "a budget without examples": (lambda d: d["budget"].pop("examples"), "budget has no 'examples'"),
    "tps as text": (lambda d: d["budget"].update(tps="2,4"), "budget.tps must be a JSON array, got text"),
}


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``marker_findings``, importable, writes the marker when imported: a report naming it must not import it."""
    path = tmp_path / "CODE-RAN"
    (tmp_path / "marker_findings.py").write_text(f"open({str(path)!r}, 'w').close()\nFINDINGS = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield path
    assert not path.exists(), "rendering a report imported the module it named"


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_report_is_exit_2_with_one_line(how, tmp_path, marker, capsys):
    change, words = DAMAGE[how]
    path = damaged(tmp_path / "report.json", change)
    for option in ("--render", "--merge"):  # a merge checks the saved report before it runs anything
        assert tpargmax(["report", option, str(path), "--rows", "nothing"]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith(f"tpargmax report: {path}: "), captured
        assert words in one_line(captured.err), captured.err


@pytest.mark.parametrize(
    "text, words",
    [("{nope", "not JSON (Expecting property name"), ("[]", "not a report: expected a JSON object, got list")],
)
def test_a_report_that_is_not_a_report_is_exit_2(text, words, tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(text)
    assert tpargmax(["report", "--render", str(path)]) == 2
    assert words in one_line(capsys.readouterr().err)


def test_the_committed_report_still_renders(capsys):
    assert tpargmax(["report", "--render", str(SAVED)]) == 1  # its page has failures: exit 1, as before
    assert capsys.readouterr().out.startswith(f"# vLLM {VLLM_VERSION} conformance")
