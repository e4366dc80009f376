"""A fuzz fleet on one live example database: a real ``redis-server`` (tests/redis_server.py), two workers with
disjoint seeds, a find replayed first by another run, one summary; and the ways the server can fail.

Budgets are rounds, examples and pinned seeds, never minutes, as in tests/test_fuzz.py.
"""

from __future__ import annotations

import json
import re
import sys
from types import SimpleNamespace

import pytest

from properties.harness import example_db
from properties.harness.fuzz_shards import shard_of, shard_seed
from properties.harness.profiles import share
from tests.redis_server import redis_server, require
from tests.suite import clear_settings, fork_the_commands, run, run_suite
from tpargmax.cli import main as tpargmax

PLANTED = "tests.broken:highest_rank_wins"
FOUND_BY_GENERATION = ["-k", "tp_invariance", "--impl", PLANTED, "--backend", "sim"]  # not a pinned edge case
UNREACHABLE = "unix:///nonexistent/tpargmax/redis.sock?db=0"


def test_two_shards_share_one_live_database_and_the_summary_lists_the_find_once(tmp_path, capsys, monkeypatch):
    require()
    import redis

    clear_settings(monkeypatch)
    fork_the_commands(monkeypatch)
    with redis_server() as url:
        monkeypatch.setenv("TPARGMAX_DB", url)  # --db sets it too; monkeypatch puts the old value back
        for shard in (1, 2):
            work = tmp_path / f"worker{shard}"
            monkeypatch.setenv("TPARGMAX_DB_DIR", str(work / "examples"))
            args = ["--rounds", "1", "--examples", "20", "--seed", "8", *FOUND_BY_GENERATION, "-n", "0"]
            args += ["--shard", f"{shard}/2", "--db", url, "--repro-dir", str(work / "repro")]
            code = tpargmax(["fuzz", *args, "--log", str(work / "fuzz-log.jsonl")])
            out = capsys.readouterr().out
            assert code == 1, out[-3000:]
            (entry,) = [json.loads(line) for line in (work / "fuzz-log.jsonl").read_text().splitlines()]
            assert entry["shard"] == f"{shard}/2" and entry["seed"] % 2 == shard - 1  # disjoint seeds
        saved = redis.Redis.from_url(url).dbsize()
        assert saved > 0

        # another machine's next dev run, with an empty directory of its own, replays the find first; read-only,
        # as a pull request's run is, it leaves the server as it found it
        plain = run_suite(
            "properties/test_equivalence.py",
            *FOUND_BY_GENERATION,
            "--hypothesis-show-statistics",
            profile="dev",
            TPARGMAX_DB=url,
            TPARGMAX_DB_DIR=str(tmp_path / "elsewhere"),
            TPARGMAX_DB_READONLY="1",
        )
        assert plain.returncode == 1, plain.stdout[-3000:]
        reuse = plain.stdout.split("during reuse phase")[1].split("\n\n")[0]
        assert re.search(r"\b[1-9]\d* failing", reuse), reuse
        assert redis.Redis.from_url(url).dbsize() == saved

    summary = tmp_path / "summary.md"
    merged = tmp_path / "merged"
    assert tpargmax(["fuzz-summary", str(tmp_path / "worker1"), str(tmp_path / "worker2"), "--out", str(summary)]) == 0
    assert tpargmax(["fuzz-summary", str(tmp_path), "--repro-out", str(merged)]) == 0
    text = summary.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| test_tp_invariance |")]
    assert len(rows) == 1 and "1 distinct find(s)" in text, text
    assert "1/2 on" in text and "2/2 on" in text and "without a repro file" not in text, text
    assert sorted(p.name for p in merged.glob("*.json")) == sorted({p.name for p in tmp_path.rglob("repro/*.json")})


def test_a_server_that_dies_mid_run_loses_no_find(tmp_path):
    with redis_server() as url:
        done = run_suite(
            "properties/test_equivalence.py",
            *FOUND_BY_GENERATION,
            "--fuzz-seed=8",
            "--max-examples",
            str(round(10 / share("test_tp_invariance", "sim"))),  # tp invariance's share of it: the 10 that find it
            "-p",
            "tests.redis_dies",
            profile="dev",
            TPARGMAX_DB=url,
            TPARGMAX_DB_DIR=str(tmp_path / "examples"),
            TPARGMAX_REPRO_DIR=str(tmp_path / "repro"),
        )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]  # the find, not an error from the dead server
    assert "FAILED properties/test_equivalence.py::test_tp_invariance" in out, out[-3000:]
    assert "ServerWentAway" in out and "went away" in out, out[-3000:]
    assert list((tmp_path / "repro").glob("test_tp_invariance-*.json")), out[-3000:]
    assert any(p.is_file() for p in (tmp_path / "examples").rglob("*"))  # the directory kept the find


def test_a_server_that_cannot_be_reached_is_one_line_not_a_fall_back(capsys, monkeypatch):
    require(server=False)
    done = run(
        [sys.executable, "-m", "pytest", "-q", "properties/test_equivalence.py"], fresh=True, TPARGMAX_DB=UNREACHABLE
    )
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith(f"ERROR: TPARGMAX_DB={UNREACHABLE}: cannot reach the Redis server"), line
    clear_settings(monkeypatch)
    monkeypatch.setenv("TPARGMAX_DB", "unused")
    assert tpargmax(["fuzz", "--rounds", "1", "--db", UNREACHABLE]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tpargmax fuzz: TPARGMAX_DB=unix:///nonexistent/"), line


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://db.example/0", "a directory or a Redis URL"),
        ("redis://user:secret@127.0.0.1:1/0", "redis://***@127.0.0.1:1/0"),  # never the password
    ],
)
def test_a_database_that_cannot_be_used_is_named_in_one_line(url, words, monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)  # no client: the message says how to get it
    why = example_db.problem(url)
    assert why is not None and "\n" not in why and words in why and "secret" not in why, why
    if url.startswith("redis://"):
        assert example_db.INSTALL_HINT in why


@pytest.mark.parametrize("shard", ["0/2", "3/2", "1", "a/b"])
def test_a_shard_is_i_of_n(shard, capsys):
    with pytest.raises(SystemExit) as info:
        tpargmax(["fuzz", "--rounds", "1", "--shard", shard])
    assert info.value.code == 2 and "--shard" in capsys.readouterr().err


def test_shards_of_the_tests_are_disjoint_and_cover_them():
    ids = [f"properties/test_equivalence.py::test_{name}[{impl}-sim]" for name in "abcde" for impl in "xy"]
    shares = [shard_of(ids, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(sum(shares, [])) == sorted(ids) and all(len(s) in (3, 4) for s in shares)
    assert shard_seed(5, (2, 3)) % 3 == 1 and shard_seed(2**32 // 3 - 1, (3, 3)) < 2**32


def test_pytest_runs_its_share_of_the_tests():
    """conftest's --shard-tests: worker I keeps its share, and says which it deselected (in-process: a collection
    costs a subprocess)."""
    import conftest

    def shard(option: str | None) -> tuple[list[str], list[str]]:
        deselected: list[str] = []
        config = SimpleNamespace(
            getoption=lambda name: option if name == "shard_tests" else None,
            hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(i.nodeid for i in items)),
        )
        items = [SimpleNamespace(nodeid=f"p.py::test_{n}", get_closest_marker=lambda _: None) for n in "dcba"]
        conftest.pytest_collection_modifyitems(config, items)
        return [i.nodeid for i in items], deselected

    first, second = shard("1/2"), shard("2/2")
    assert first[0] == second[1] and second[0] == first[1] and len(first[0]) == 2
    assert shard(None)[1] == []
    with pytest.raises(pytest.UsageError, match="--shard-tests: I/N needs 1 <= I <= N"):
        shard("3/2")


def test_the_summary_lists_a_find_once_and_a_failure_without_a_file_apart(tmp_path, capsys):
    """Two workers' logs and files, written as tpargmax fuzz writes them: one find in two files, one error."""
    found = "properties/test_equivalence.py::test_token_exact[tests.broken:x-sim]"
    errored = "properties/test_top_k.py::test_top_k_exact[tests.broken:y-gloo]"
    for shard, case in ((1, "Case(batch=1)"), (2, "Case(batch=2)")):
        work = tmp_path / f"w{shard}"
        (work / "repro").mkdir(parents=True)
        failing = [found, errored] if shard == 2 else [found]
        entry = {"round": 1, "examples": 10 * shard, "seconds": 5.0, "shard": f"{shard}/2", "host": "h"}
        entry |= {"failing_tests": failing, "tests": {found: 10 * shard}}
        (work / "fuzz-log.jsonl").write_text(json.dumps(entry) + "\n")
        record = {"format": "tpargmax-repro/2", "test": "test_token_exact", "impl": "tests.broken:x"}
        record |= {"backend": "sim", "rule": "tie | resolved", "case": case}
        (work / "repro" / f"test_token_exact-{shard}.json").write_text(json.dumps(record))
    (tmp_path / "w1" / "repro" / "notes.json").write_text("{}")  # not a repro file: left out
    assert tpargmax(["fuzz-summary", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "2 worker(s), 2 round(s), 30 examples; 1 distinct find(s)." in text, text
    (row,) = [line for line in text.splitlines() if line.startswith("| test_token_exact |")]
    assert "tie \\| resolved" in row and "1/2 on h, 2/2 on h" in row and row.count(".json") == 2, row
    assert f"- `{errored}`" in text and f"| `{found}` | 30 |" in text and "| 2/2 on h | 1 | 20 | 5 | 4.0 | 1 |" in text
    assert tpargmax(["fuzz-summary", str(tmp_path / "w1" / "repro")]) == 2  # no log: one line, exit 2
    assert "no fuzz log" in capsys.readouterr().err
