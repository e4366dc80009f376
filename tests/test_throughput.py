"""``tpargmax throughput``: its reading of pytest's output, its tables, and ``--compare`` on a throwaway repository.

No real suite runs here: the compare tests clone a git repository made in ``tmp_path`` whose README's commands are
a ``true``-like setup and a script that prints what pytest and Hypothesis print, through the real clone, checkout,
setup and timing code.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tpargmax import cli
from tpargmax.fuzz import stats
from tpargmax.throughput import compare as throughput_compare
from tpargmax.throughput.compare import Commit, Run, compare, parse_output, readme_commands, table
from tpargmax.throughput.examples import command, per_property, property_files, render

ROOT = Path(__file__).resolve().parent.parent

# what `pytest -n 2 --hypothesis-show-statistics` prints: a failing test's three phases, a test id with a space
XDIST_OUTPUT = """\
2 workers [9 items]
..F.s.x..                                                                [100%]
============================ Hypothesis Statistics =============================
properties/test_equivalence.py::test_token_exact[vllm_pairs-sim]:

  - during generate phase (3.77 seconds):
    - Typical runtimes: ~ 3-27 ms, of which ~ 0-2 ms in data generation
    - 300 passing, 0 failing, and 2 invalid test cases

  - Stopped because settings.max_examples=300


properties/test_top_k.py::test_top_k_exact[topk_pairs-gloo]:

  - during generate phase (0.70 seconds):
    - Typical runtimes: ~ 7-18 ms, of which ~ 0-2 ms in data generation
    - 41 passing, 1 failing, and 0 invalid test cases
    - Found 1 distinct error in this phase

  - during shrink phase (0.20 seconds):
    - Typical runtimes: ~ 1-3 ms, of which < 1ms in data generation
    - 12 passing, 3 failing, and 0 invalid test cases
    - Tried 15 shrinks of which 3 were successful

  - Stopped because nothing left to do


tests/test_power.py::test_planted[a case with spaces]:

  - during generate phase (0.10 seconds):
    - Typical runtimes: < 1ms, of which < 1ms in data generation
    - 7 passing, 0 failing, and 0 invalid test cases

  - Stopped because settings.max_examples=7

=========================== short test summary info ============================
FAILED properties/test_top_k.py::test_top_k_exact[topk_pairs-gloo] - AssertionError: 2 passed in 1s
====== 1 failed, 5 passed, 1 skipped, 1 xfailed, 2 errors, 3 warnings in 12.34s (0:00:12) ======
"""


def test_the_run_and_every_process_it_starts_write_bytecode():
    """A fresh clone compiles the project once, not once per process: conftest turns bytecode writing back on where
    PYTHONDONTWRITEBYTECODE had it off, before importing the project, here and (by the environment) in all it starts."""
    assert not sys.dont_write_bytecode and "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert list((ROOT / "tests" / "__pycache__").glob(f"{Path(__file__).stem}.*-pytest-*.pyc")), "no rewritten copy"


def test_the_output_gives_every_outcome_as_a_test_and_every_passing_line_as_examples():
    tests, examples, summary = parse_output(XDIST_OUTPUT)
    assert summary == "1 failed, 5 passed, 1 skipped, 1 xfailed, 2 errors, 3 warnings in 12.34s (0:00:12)"
    assert tests == 1 + 5 + 1 + 1 + 2  # warnings are not tests
    assert examples == 300 + 41 + 12 + 7  # passing only, every phase, every test (also one whose id has a space)


def test_a_quiet_summary_and_no_tests_at_all_are_read_too():
    assert parse_output("....\n  - 4 passing, 0 failing, and 0 invalid test cases\n420 passed, 32 skipped in 113.20s")[
        :2
    ] == (452, 4)
    assert parse_output("\n============ no tests ran in 0.01s ============\n") == (0, 0, "no tests ran in 0.01s")
    assert parse_output("Traceback (most recent call last):\nboom\n") == (0, 0, "")


def test_the_table_lists_each_run_and_divides_the_median_examples_by_the_median_wall():
    before = Commit(sha="c5ddcb3" + "0" * 33, short="c5ddcb3", label="before issues 27-30")
    before.runs.append(Run(0, 184.4, 452, 11780, ""))
    now = Commit(sha="00ed91d" + "0" * 33, short="00ed91d", label="HEAD")
    now.runs += [Run(0, 128.0, 629, 7751, ""), Run(0, 163.2, 629, 7751, ""), Run(1, 101.0, 630, 7760, "")]
    assert table([before, now]).splitlines() == [
        "| commit | tests | examples | wall | examples/s |",
        "|---|---|---|---|---|",
        "| c5ddcb3 (before issues 27-30) | 452 | 11,780 | 184 s | 64 |",
        "| 00ed91d (HEAD) | 629–630 | 7,751–7,760 | 128, 163, 101 s (median 128, 3 runs) | 61 |",
    ]


STATISTICS = """\
properties/test_sampling.py::test_sample_exact[gumbel_pairs-sim]:
  - during generate phase (2.00 seconds):
    - Typical runtimes: ~ 5 ms
    - 75 passing, 0 failing, and 0 invalid test cases
properties/test_sampling.py::test_sample_exact[candidates-sim]:
  - during generate phase (1.00 seconds):
    - Typical runtimes: ~ 9 ms
    - 75 passing, 0 failing, and 0 invalid test cases
properties/test_sampling.py::test_sampled_distribution[gumbel_pairs-tp2-nan]:
  - during generate phase (0.50 seconds):
    - Typical runtimes: ~ 2 ms
    - 10 passing, 0 failing, and 0 invalid test cases
properties/test_equivalence.py::test_token_exact[vllm_pairs-gloo]:
  - during generate phase (0.50 seconds):
    - Typical runtimes: ~ 7 ms
    - 50 passing, 0 failing, and 0 invalid test cases
"""


def test_each_property_and_backend_is_one_row_over_its_parametrizations():
    reader = stats.StatisticsReader()
    for line in STATISTICS.splitlines():
        reader.feed(line)
    rows = per_property(reader.tests, ("sim", "gloo", "torchrun"))
    assert rows == {
        ("test_sample_exact", "sim"): stats.TestStats(150, 3.0, "~ 5 ms"),
        ("test_sampled_distribution", "-"): stats.TestStats(10, 0.5, "~ 2 ms"),
        ("test_token_exact", "gloo"): stats.TestStats(50, 0.5, "~ 7 ms"),
    }
    lines = [line.split() for line in render(rows).splitlines()]
    assert lines[1] == ["test_sample_exact", "sim", "150", "3.00", "50", "~", "5", "ms"]
    assert lines[-3:] == [
        ["all", "properties", "sim", "150", "3.00", "50"],
        ["all", "properties", "-", "10", "0.50", "20"],
        ["all", "properties", "gloo", "50", "0.50", "100"],
    ]


def test_the_run_takes_every_property_file_and_only_the_options_the_suite_has():
    files = property_files()
    assert {"properties/test_equivalence.py", "properties/test_sampling.py", "properties/test_traffic.py"} <= set(files)
    assert files == sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("properties/test_*.py"))
    args = argparse.Namespace(impl="vllm_pairs", topk_impl=None, sampling_impl="candidates", backend="sim", k="exact")
    cmd = command(args)
    assert cmd[cmd.index("--impl") + 1] == "vllm_pairs" and cmd[cmd.index("--sampling-impl") + 1] == "candidates"
    assert "--topk-impl" not in cmd and cmd[cmd.index("--backend") + 1] == "sim" and cmd[-2:] == ["-k", "exact"]
    options = (ROOT / "properties" / "harness" / "options.py").read_text(encoding="utf-8")
    for option in {c for c in cmd if c.startswith("--")} - {"--hypothesis-profile", "--hypothesis-show-statistics"}:
        assert f'"{option}"' in options, option


def test_the_events_switch_is_the_one_the_suite_reads():
    from properties.harness.coverage import EVENTS_ENV

    assert throughput_compare.EVENTS_ENV == EVENTS_ENV


def test_under_load_takes_the_shared_reader_and_no_torch():
    probe = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('under_load', {str(ROOT / 'scripts' / 'under_load.py')!r}); "
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
        "import tpargmax.throughput.compare as shared; "
        "assert module.readme_commands is shared.readme_commands; "
        "assert 'torch' not in sys.modules and 'hypothesis' not in sys.modules, 'imported torch or hypothesis'; "
        "print(module.readme_commands(shared.ROOT)[0])"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == readme_commands(ROOT)[0] and "pip install" in done.stdout


# the fake suite: it logs what ran where, refuses to run without the statistics flag, prints pytest's lines
FAKE_SUITE = """\
import os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(f"{{sys.argv[1]}} {{os.environ.get('TPARGMAX_FEATURE_EVENTS')}} {{os.path.exists('setup-ran')}}\\n")
if sys.argv[-1] != "--hypothesis-show-statistics":
    sys.exit(4)
for n in {passing}:
    print(f"  - {{n}} passing, 0 failing, and 0 invalid test cases")
print("========== {summary} in 0.01s ==========")
sys.exit({status})
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def commit(repo: Path, name: str, passing: list[int], summary: str, status: int = 0) -> str:
    setup = f'echo setup {name} >> "$FAKE_LOG" && echo > setup-ran'
    test = f"{shlex.quote(sys.executable)} fake_suite.py {name}"
    (repo / "README.md").write_text(f"# fake\n\n```bash\n{setup}\n{test}\n```\n", encoding="utf-8")
    (repo / "fake_suite.py").write_text(FAKE_SUITE.format(passing=passing, summary=summary, status=status))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "--short", "HEAD")


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    return repo


def test_compare_clones_sets_up_and_times_both_commits_interleaved(repo, capsys):
    before = commit(repo, "before", [3], "4 passed")
    git(repo, "tag", "v1")
    head = commit(repo, "now", [5, 5], "7 passed, 2 skipped")
    (repo / "fake_suite.py").write_text("raise SystemExit(3)\n")  # uncommitted: a clone never sees it
    assert compare("v1", runs=2, repo=repo) == 0
    log = (repo.parent / "log").read_text().splitlines()
    assert log == ["setup before", "setup now", *["before off True", "now off True"] * 2]
    out = capsys.readouterr().out
    rows = out[out.index("| commit |") :].splitlines()
    assert re.fullmatch(rf"\| {before} \(v1\) \| 4 \| 3 \| \d+, \d+ s \(median \d+, 2 runs\) \| [\d,]+ \|", rows[2])
    assert re.fullmatch(rf"\| {head} \(HEAD\) \| 9 \| 10 \| \d+, \d+ s \(median \d+, 2 runs\) \| [\d,]+ \|", rows[3])
    python = shlex.quote(sys.executable)
    assert f"{python} fake_suite.py before" in out and f"{python} fake_suite.py now" in out


def test_a_failing_run_exits_1_and_is_named(repo, capsys):
    before = commit(repo, "before", [3], "4 passed")
    head = commit(repo, "broken", [], "no tests ran", status=5)
    assert cli.main(["throughput", "--compare", before, "--repo", str(repo)]) == 1
    captured = capsys.readouterr()
    assert f"| {head} (HEAD) | 0 | 0 |" in captured.out  # the table is still printed
    failures = [line for line in captured.err.splitlines() if "failed" in line]
    assert failures == [
        f"tpargmax throughput: run 1 of 1 at {head} (HEAD) failed: pytest exit 5: no tests ran in 0.01s"
    ]


def test_an_unknown_revision_or_options_without_compare_are_refused(repo, capsys):
    commit(repo, "only", [1], "1 passed")
    assert compare("no-such-rev", repo=repo) == 1
    assert "no-such-rev" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(["throughput", "--runs", "3"])
    assert stop.value.code == 2 and "--compare" in capsys.readouterr().err
