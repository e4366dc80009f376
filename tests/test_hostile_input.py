"""Hostile and damaged input at every entry point that reads one: nothing runs, exit 2, one line, no traceback.

Case strings (``python -m properties.replay``), repro files and their side files (``tpargmax repro``,
``tpargmax promote`` and the regression test that replays committed files) and draft checkpoints
(``tpargmax check-d2t``) come from other people.  Every hostile input here tries to create a marker file;
the marker must never appear.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from properties.argmax.checks import ROW_INDEPENDENCE, TOKEN_EXACT
from properties.cases.case import TENSORS, Case
from properties.cases.text import FIELDS, parse_case
from properties.harness import runner
from properties.replay import main as replay_main
from properties.repro import records as repro
from tests.d2t_fixtures import HERE
from tests.suite import run, run_suite
from tpargmax.cli import main as tpargmax

# What someone pasting from a bug report could be handed: the first is the string the issue reported.
ESCAPE = "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings'][0]()"
HOSTILE_CASES = {
    "the reported escape": ESCAPE + "._module.__builtins__['__import__']('os').system('touch {m}')",
    "a bare call": "__import__('os').system('touch {m}')",
    "a call as a field": "Case(batch=__import__('os').system('touch {m}'), hidden=3, vocab=7, tp=1)",
    "a call inside a tuple": "Case(batch=1, hidden=3, vocab=7, tp=1, ties=(open('{m}', 'w').name,))",
    "a call in an f-string": "Case(batch=1, hidden=3, vocab=7, tp=1, dtype=f\"{{open('{m}', 'w').name}}\")",
    "a ** mapping": "Case(**{{'batch': __import__('os').system('touch {m}')}})",
    "a lambda": "(lambda: open('{m}', 'w'))()",
    "a second statement": "Case(batch=1, hidden=3, vocab=7, tp=1); open('{m}', 'w')",
    "a comprehension": "Case(batch=[open('{m}', 'w') for _ in 'x'][0], hidden=3, vocab=7, tp=1)",
    "an attribute chain": "Case.__init__.__globals__['torch'].save(0, '{m}')",
}
BAD_FIELDS = {  # a Case string that is data, but not a case the suite can build: the field is named
    "Case(batch=1, hidden=3, vocab='abc', tp=1)": "Case field 'vocab' must be an int",
    "Case(batch=1, hidden=3, vocab=10**12, tp=1)": "Case field 'vocab' must be a literal",
    "Case(batch=1, hidden=3, vocab=1000000000000, tp=1)": "Case field 'vocab' must be an int in [1, 2097152]",
    "Case(batch=1, hidden=3, vocab=7, tp=1, ties=('whole_row', 'rm -rf'))": "Case field 'ties' must be a tuple",
    "Case(batch=1, hidden=3, vocab=7, tp=1, scale=-1.0)": "Case field 'scale' must be a finite number > 0",
    "Case(batch=1, hidden=3, vocab=7, tp=3)": "tp=3 cannot split this head",
    "Case(batch=1, hidden=3, vocab=7)": "Case field 'tp' is missing",
    "Case(batch=1, hidden=3, vocab=7, tp=1, evil=1)": "unknown Case field 'evil'",
}


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    path = tmp_path / "CODE-RAN"
    yield path
    assert not path.exists(), "hostile input ran code"


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_the_reported_case_string_prints_one_line_and_runs_nothing(marker):
    # forked from a process that imported torch (a fresh start's quiet is tests/test_entry_points.py's)
    out = run([sys.executable, "-m", "properties.replay", HOSTILE_CASES["the reported escape"].format(m=marker)])
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert "expected Case(name=value, ...)" in one_line(out.stderr)


@pytest.mark.parametrize("how", sorted(HOSTILE_CASES))
def test_a_case_string_with_code_is_refused_unrun(how, marker, capsys):
    assert replay_main([HOSTILE_CASES[how].format(m=marker)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and one_line(captured.err).startswith("python -m properties.replay: "), captured


@pytest.mark.parametrize("text", sorted(BAD_FIELDS))
def test_a_case_string_with_a_bad_field_names_the_field(text, capsys):
    assert replay_main([text]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and BAD_FIELDS[text] in one_line(captured.err), captured.err


CODE = st.sampled_from(
    ["__import__('os').system('touch {m}')", "open('{m}', 'w')", "exec('1')", "x.y", "f(1)", "[1]", "{{1: 2}}", "*a"]
)
LITERALS = st.one_of(st.integers(), st.floats(), st.text(max_size=8), st.none(), st.booleans()).map(repr)
KEYWORDS = st.tuples(st.sampled_from(FIELDS) | st.text(max_size=6), LITERALS | CODE | st.text(max_size=12))
JUNK_CASES = st.text(max_size=120) | st.lists(KEYWORDS, max_size=6).map(
    lambda kws: "Case(" + ", ".join(f"{k}={v}" for k, v in kws) + ")"
)


@settings(max_examples=300, deadline=None)
@given(text=JUNK_CASES)
def test_junk_case_strings_parse_to_a_case_or_one_line(text, tmp_path_factory):
    mark = tmp_path_factory.getbasetemp() / "CODE-RAN"
    try:
        case = parse_case(text.replace("{m}", str(mark)))
    except ValueError as exc:
        assert "\n" not in str(exc), str(exc)
    else:
        assert isinstance(case, Case)
    assert not mark.exists(), text


# --- repro files ---------------------------------------------------------------------------------------------

GOOD_CASE = Case(batch=2, hidden=3, vocab=7, tp=2, bias=True, d2t="eagle3", target_extra=5)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A small repro file that replays clean (a vllm_pairs record, token exactness)."""
    inputs = runner.prepare(GOOD_CASE, "sim")
    failure = {"inputs": inputs, "property": TOKEN_EXACT, "rule": "a rule", "impl": "vllm_pairs", "extra": {}}
    return repro.write(tmp_path / "records", failure, test="test_token_exact")


def edit(path: Path, change) -> Path:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    return path


def named_side_file(name: str):
    return lambda r: (r.pop("tensors"), r.update(tensors_file=name))


def side_file(path: Path, tensors: object, name: str = "tensors.pt") -> Path:
    """The record with its tensors moved to a side file holding ``tensors`` (default: its own)."""
    torch.save(tensors, path.parent / name)
    return edit(path, named_side_file(name))


class RunsCode:
    """Pickles to a call that creates the marker: a weights-only load must refuse it unrun."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def own_tensors(path: Path) -> dict[str, torch.Tensor]:
    _, inputs = repro.load(path)
    return {name: getattr(inputs, name) for name in TENSORS}


def linked_out(path: Path, marker: Path) -> Path:
    outside = path.parent.parent / "elsewhere"
    outside.mkdir()
    torch.save(own_tensors(path), outside / "real.pt")
    (path.parent / "tensors.pt").symlink_to(outside / "real.pt")
    return edit(path, named_side_file("tensors.pt"))


def field(name: str, value: object):
    return lambda r: r.update({name: value})


def case_field(name: str, value: object):
    return lambda r: r["case_fields"].update({name: value})


def tensor(name: str, **entry: object):
    return lambda r: r["tensors"].setdefault(name, {}).update(entry)


def test_a_tests_own_d2t_beside_a_case_of_none_replays_and_only_a_table_of_its_shape_is_taken(tmp_path):
    """The d2t flag's ties hand their own table to a case whose d2t plan is none: the suite writes it beside the
    case, and the file must load (it did not: vllm-ascend's draft pick raised there), but a table of another shape
    or dtype is still refused."""
    case = Case(batch=1, hidden=3, vocab=2, tp=2)
    inputs = dataclasses.replace(runner.prepare(case, "sim"), d2t=torch.tensor([1, -1]))
    failure = {"inputs": inputs, "property": TOKEN_EXACT, "rule": "a rule", "impl": "vllm_pairs", "extra": {}}
    path = repro.write(tmp_path / "records", failure, test="test_the_flag_fires_exactly_on_non_monotone_tables")
    _, loaded = repro.load(path)
    assert loaded.case.d2t == "none" and loaded.d2t.tolist() == [1, -1]
    edit(path, tensor("d2t", shape=[3], hex="00" * 24))
    with pytest.raises(
        repro.DamagedRepro, match="tensor 'd2t' is torch.int64 \\[3\\]; its case builds torch.int64 \\[2\\]"
    ):
        repro.load(path)


DAMAGED = {  # how the file is damaged -> (how to damage a good file, words its one line must hold)
    # the rows of the table
    "not JSON": (lambda p, m: p.write_text("{nope") and p, "not JSON (Expecting property name"),
    "case_fields missing": (lambda p, m: edit(p, lambda r: r.pop("case_fields")), "'case_fields' is missing"),
    "vocab 'abc'": (lambda p, m: edit(p, case_field("vocab", "abc")), "Case field 'vocab' must be an int"),
    "vocab 10**12": (lambda p, m: edit(p, case_field("vocab", 10**12)), "in [1, 2097152], got 1000000000000"),
    "tensors_file ../../../etc/passwd": (
        lambda p, m: edit(p, named_side_file("../../../etc/passwd")),
        "'tensors_file' must be the name of a .pt file beside the record, got '../../../etc/passwd'",
    ),
    # side files
    "tensors_file absolute": (lambda p, m: edit(p, named_side_file("/tmp/x.pt")), "must be the name of a .pt"),
    "tensors_file runs code": (
        lambda p, m: side_file(p, {"hidden": RunsCode(m)}),
        "refused by the weights-only loader, nothing in it ran: Trying to load unsupported GLOBAL posix.system",
    ),
    "tensors_file a link out": (linked_out, "'tensors.pt' is a link that leads out of the record's directory"),
    "tensors_file missing": (lambda p, m: edit(p, named_side_file("x.pt")), "'x.pt' is not beside the record"),
    "tensors inline and in a file": (lambda p, m: edit(p, field("tensors_file", "x.pt")), "inline or in a side file"),
    "tensors_file a list": (lambda p, m: side_file(p, [torch.zeros(1)]), "must hold a dict of tensors, got list"),
    "tensors_file wrong shape": (
        lambda p, m: side_file(p, {**own_tensors(p), "hidden": torch.zeros(5, 3)}),
        "tensor 'hidden' is torch.float32 [5, 3]; its case builds torch.float32 [2, 3]",
    ),
    # inline tensors
    "hex of the wrong length": (lambda p, m: edit(p, tensor("hidden", hex="00")), "2 hex digits do not hold"),
    "hex that is not hex": (lambda p, m: edit(p, tensor("pad_bias", hex="zzzzzzzz")), "its bytes are not hex"),
    "a tensor it has no use for": (
        lambda p, m: edit(p, tensor("evil", dtype="torch.float32", shape=[], hex="00000000")),
        "tensor 'evil' is not one its case has",
    ),
    "a dtype torch has but a case never holds": (
        lambda p, m: edit(p, tensor("hidden", dtype="torch.complex64")),
        "tensor 'hidden' must be {dtype:",
    ),
    "a d2t out of range": (
        lambda p, m: edit(p, tensor("d2t", hex=("ff" * 7 + "7f") + "00" * 8 * 6)),
        "d2t maps draft ids out of range",
    ),
    "a missing tensor": (lambda p, m: edit(p, lambda r: r["tensors"].pop("bias")), "tensor 'bias' is missing"),
    # the record's own fields
    "a JSON array": (lambda p, m: p.write_text("[]") and p, "expected a JSON object, got list"),
    "not UTF-8": (lambda p, m: p.write_bytes(b"\xff\xfe{}") and p, "not UTF-8 text"),
    "nested too deep": (lambda p, m: p.write_text("[" * 100_000) and p, "not JSON"),
    "an int of 5000 digits": (lambda p, m: p.write_text('{"format": ' + "9" * 5000 + "}") and p, "not JSON (Exceeds"),
    "an unknown format": (lambda p, m: edit(p, field("format", "pickle")), "not a tpargmax-repro/2 file"),
    "a case string with code": (
        lambda p, m: edit(p, field("case", f"Case(batch=1) or __import__('os').system('touch {m}')")),
        "its 'case' string",
    ),
    "a rule over two lines": (
        lambda p, m: edit(p, field("rule", "x\nimport os; os.system('touch CODE-RAN')")),
        "'rule' must be one printable line",
    ),
    "an escape sequence in the impl": (lambda p, m: edit(p, field("impl", "\x1b[2J")), "'impl' must be one printable"),
    "an unknown case field": (lambda p, m: edit(p, case_field("evil", 1)), "unknown Case field 'evil'"),
    "a case field that is an object": (lambda p, m: edit(p, case_field("seed", {"a": 1})), "Case field 'seed' must be"),
    "a target_vocab its case does not build": (lambda p, m: edit(p, field("target_vocab", 3)), "'target_vocab' is 3"),
    "an unknown backend": (lambda p, m: edit(p, field("backend", "nccl")), "'backend' must be one of"),
    "k beyond the vocabulary": (lambda p, m: edit(p, field("extra", {"k": 10**9})), "extra 'k' must be an int"),
    "an unknown bad input": (lambda p, m: edit(p, field("extra", {"bad": "rm"})), "extra 'bad' must be one of"),
    "rows beyond the batch": (lambda p, m: edit(p, field("extra", {"rows": [5]})), "extra 'rows' must be"),
    "a tp that cannot split": (lambda p, m: edit(p, field("extra", {"tps": [3]})), "extra 'tps': tp=3 cannot split"),
    "no such file": (lambda p, m: p.with_name("gone.json"), "cannot read it: No such file or directory"),
    "a property without its extra": (
        lambda p, m: edit(p, field("property", ROW_INDEPENDENCE)),
        "its property replays with extra 'rows', which is missing",
    ),
}


@pytest.mark.parametrize("how", sorted(DAMAGED))
def test_a_damaged_repro_file_is_exit_2_with_one_line(how, good, marker, capsys):
    damage, words = DAMAGED[how]
    path = damage(good, marker)
    for command, options in (("repro", []), ("promote", ["--out", str(path.parent)])):
        assert tpargmax([command, str(path), *options]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith(f"tpargmax {command}: {path}: "), captured
        assert words in one_line(captured.err), captured.err


def test_the_good_file_and_its_side_file_form_replay_clean(good, capsys):
    """The damage above is what each file is refused for: undamaged, the same file replays and is fixed."""
    assert tpargmax(["repro", str(good)]) == 0
    assert tpargmax(["repro", str(side_file(good, own_tensors(good)))]) == 0
    assert capsys.readouterr().out.count("fixed: the property holds") == 2


def test_a_damaged_file_among_others_is_named_and_the_rest_still_replay(good, capsys):
    broken = good.with_name("broken.json")
    broken.write_text("{nope")
    assert tpargmax(["repro", str(good.parent)]) == 2  # a directory: every file in it, in name order
    captured = capsys.readouterr()
    assert "fixed: the property holds" in captured.out and "broken.json: not JSON" in one_line(captured.err)


@pytest.mark.parametrize(
    "change",
    [field("impl", "no_such_module:fn"), field("extra", {"argmax_impl": "no_such_module:fn", "k": 1})],
    ids=["impl", "argmax_impl"],
)
def test_an_implementation_that_cannot_be_loaded_is_exit_2(change, good, capsys):
    """Not one the project ships, so not imported unasked (tests/test_verdicts.py); asked for, it cannot load."""
    path = str(edit(good, change))
    assert tpargmax(["repro", path]) == 2
    assert "'no_such_module:fn' is not one the project ships" in one_line(capsys.readouterr().err)
    assert tpargmax(["repro", path, "--trust-recorded-impl"]) == 2
    assert "cannot load it: No module named 'no_such_module'" in one_line(capsys.readouterr().err)


def test_promote_writes_the_parsed_case_and_one_comment_line(good, tmp_path, capsys):
    assert tpargmax(["promote", str(edit(good, field("created", "1 Jan; evil"))), "--out", str(tmp_path)]) == 0
    (patch,) = tmp_path.glob("*.patch")
    added = [line[1:] for line in patch.read_text().splitlines() if line.startswith("+") and not line.startswith("++")]
    assert added == [f"    {GOOD_CASE!r},  # promoted: a rule (vllm_pairs, undated)"], added


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10) | CODE,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
WHERE = st.sampled_from(
    ["format", "property", "case", "case_fields", "target_vocab", "applied", "backend", "extra", "tensors"]
)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_generated_json_never_runs_code_nor_prints_a_traceback(data, tmp_path_factory):
    """Junk JSON as the whole record, or in place of one of its fields, case fields, extras or tensor entries: exit 2
    with one line on stderr, or (when the junk happens to be valid) a plain replay; any exception fails this test."""
    directory = tmp_path_factory.mktemp("junk")
    failure = {"inputs": runner.prepare(GOOD_CASE, "sim"), "property": TOKEN_EXACT, "rule": "r", "impl": "vllm_pairs"}
    record = json.loads(repro.write(directory, {**failure, "extra": {}}).read_text())
    target = data.draw(st.sampled_from(["whole", "field", "case field", "extra", "tensor entry"]))
    if target == "whole":
        record = data.draw(JSON)
    elif target == "field":
        record[data.draw(WHERE)] = data.draw(JSON)
    elif target == "case field":
        record["case_fields"][data.draw(st.sampled_from(FIELDS))] = data.draw(JSON)
    elif target == "extra":
        record["extra"][data.draw(st.sampled_from(["k", "rows", "tps", "bad", "argmax_impl"]))] = data.draw(JSON)
    else:
        entry = record["tensors"][data.draw(st.sampled_from(sorted(record["tensors"])))]
        entry[data.draw(st.sampled_from(["dtype", "shape", "hex"]))] = data.draw(JSON)
    path = directory / "junk.json"
    path.write_text(json.dumps(record).replace("{m}", str(directory / "CODE-RAN")))
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = tpargmax(["repro", str(path)])
    if code == 2:
        assert out.getvalue() == "" and err.getvalue().count("\n") == 1, err.getvalue()
    else:
        assert code in (0, 1) and err.getvalue() == "", (code, err.getvalue())
    assert not (directory / "CODE-RAN").exists()


def test_the_regression_test_fails_a_damaged_committed_file_in_one_line(good, marker):
    """A damaged file in the repro directory fails its own regression test with the reason; the rest still run."""
    for how in ("not JSON", "vocab 'abc'", "tensors_file runs code"):
        path = good.with_name(f"{how.split()[0]}-{len(how)}.json")
        path.write_text(good.read_text())
        DAMAGED[how][0](path, marker)
    out = run_suite(
        "properties/test_regressions.py", "--repro-dir", str(good.parent), "--backend", "sim", "--impl", "vllm_pairs"
    )
    assert out.returncode == 1 and "3 failed, 1 passed" in out.stdout, out.stdout[-3000:]
    for how in ("not JSON", "vocab 'abc'", "tensors_file runs code"):
        assert DAMAGED[how][1] in out.stdout, out.stdout[-3000:]
    assert not re.search(r"Traceback|During handling|\.py:\d", out.stdout), out.stdout[-3000:]  # no stack


# --- draft checkpoints --------------------------------------------------------------------------------------

# a hostile draft checkpoint -> (its name, words of check-d2t's one line); some are given by their directory
CHECKPOINTS = {
    "a torch file that runs code": ("draft.pt", "refused by the weights-only loader, nothing in it ran"),
    "a legacy pickle that runs code": ("pytorch_model.bin", "refused by the weights-only loader, nothing in it ran"),
    "an index naming a shard outside": ("model.safetensors.index.json", "outside its directory"),
    "a config nested too deep": ("config.json", "the config is not readable JSON (maximum recursion depth"),
}


def hostile_checkpoint(tmp_path: Path, how: str, marker: Path) -> Path:
    name, _ = CHECKPOINTS[how]
    path = tmp_path / "draft" / name
    path.parent.mkdir()
    if how == "a torch file that runs code":
        torch.save({"d2t": RunsCode(marker)}, path)
    elif how == "a legacy pickle that runs code":  # protocol 4: torch also warns, which must not reach stderr
        path.write_bytes(pickle.dumps({"d2t": RunsCode(marker)}, protocol=4))
        return path.parent
    elif how == "a config nested too deep":
        path.write_text("[" * 100_000)
        (path.parent / "model.safetensors").write_bytes((HERE / "eagle3.safetensors").read_bytes())
        return path.parent
    else:
        path.write_text(json.dumps({"weight_map": {"d2t": "../outside.safetensors"}}))
        (tmp_path / "outside.safetensors").write_bytes(b"")
    return path


@pytest.mark.parametrize("how", sorted(CHECKPOINTS))
def test_a_hostile_checkpoint_is_exit_2_with_one_line(how, tmp_path, marker, capsys):
    path = hostile_checkpoint(tmp_path, how, marker)
    with warnings.catch_warnings(record=True) as warned:  # a warning would print lines of its own on stderr
        warnings.simplefilter("always")
        assert tpargmax(["check-d2t", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not warned, (captured, [str(w.message) for w in warned])
    assert CHECKPOINTS[how][1] in one_line(captured.err), captured.err
