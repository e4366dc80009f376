"""The nightly workflow is valid YAML, runs on a schedule as a matrix of fuzz workers on one database, merges their
finds into one summary, carries the database, uploads the finds, and names only commands that exist; the pull-request
workflow runs README's two commands as .ci/run does and reads the fleet's database read-only where its secret exists."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess

import yaml

from tests.suite import ROOT
from tpargmax.cli import build_parser
from tpargmax.throughput.compare import readme_commands

WORKFLOW = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text(encoding="utf-8"))
TRIGGERS = WORKFLOW[True]  # YAML 1.1, which PyYAML reads, takes the bare key `on` for the boolean true
JOBS = WORKFLOW["jobs"]
FUZZ, SUMMARY = JOBS["fuzz"], JOBS["summary"]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))


def _uses(job: dict) -> list[tuple[str, dict]]:
    return [(s.get("uses", ""), s.get("with", {})) for s in job["steps"]]


def _runs(job: dict) -> list[str]:
    return [s["run"] for s in job["steps"] if "run" in s]


def test_runs_nightly_on_a_schedule():
    (schedule,) = TRIGGERS["schedule"]
    assert len(schedule["cron"].split()) == 5
    assert int(FUZZ["timeout-minutes"]) <= 120


def test_n_workers_set_in_one_place_each_a_disjoint_shard(tmp_path):
    n = int(WORKFLOW["env"]["FUZZ_WORKERS"])
    (step,) = JOBS["shards"]["steps"]
    out = tmp_path / "out"
    env = {**os.environ, "FUZZ_WORKERS": str(n), "GITHUB_OUTPUT": str(out)}
    subprocess.run(["bash", "-c", step["run"]], env=env, check=True, timeout=60)
    key, _, value = out.read_text().strip().partition("=")
    assert key == "list" and json.loads(value) == [f"{i}/{n}" for i in range(1, n + 1)]
    assert FUZZ["strategy"]["matrix"]["shard"] == "${{ fromJSON(needs.shards.outputs.list) }}"
    assert FUZZ["env"]["SHARD"] == "${{ matrix.shard }}"
    (fuzz,) = [r for r in _runs(FUZZ) if " fuzz " in r]
    assert '--shard "$SHARD"' in fuzz


def test_the_workers_share_a_redis_database():
    assert "redis" in FUZZ["services"] and FUZZ["services"]["redis"]["image"].startswith("redis:")
    assert (
        "redis://localhost:6379/" in FUZZ["env"]["TPARGMAX_DB"]
        and "secrets.TPARGMAX_DB_URL" in FUZZ["env"]["TPARGMAX_DB"]
    )
    assert any("'.[redis]'" in r for r in _runs(FUZZ))


def test_restores_and_saves_the_database_and_uploads_the_finds():
    uses = _uses(FUZZ)
    assert any(u.startswith("actions/cache/restore@") and w["path"] == ".hypothesis/examples" for u, w in uses)
    assert any(u.startswith("actions/cache/save@") and w["path"] == ".hypothesis/examples" for u, w in uses)
    (worker,) = [w for u, w in uses if u.startswith("actions/upload-artifact@")]
    assert ".hypothesis/examples" in worker["path"] and "fuzz-results/" in worker["path"]
    assert worker["include-hidden-files"] is True  # upload-artifact leaves out .hypothesis otherwise
    merged = {w["name"]: w for u, w in _uses(SUMMARY) if u.startswith("actions/upload-artifact@")}
    assert "hypothesis-example-db" in merged  # GitHubArtifactDatabase's default artifact name
    assert merged["hypothesis-example-db"]["include-hidden-files"] is True
    assert "repro/" in merged["tpargmax-repro"]["path"]


def test_a_final_job_merges_every_worker_into_the_job_summary():
    assert SUMMARY["needs"] == "fuzz" and SUMMARY["if"] == "always()"
    runs = _runs(SUMMARY)
    (merge,) = [r for r in runs if "fuzz-summary" in r and r.startswith(".venv/bin/tpargmax")]
    assert "--out fuzz-summary.md" in merge and "--repro-out repro" in merge
    assert any("fuzz-summary.md" in r and "$GITHUB_STEP_SUMMARY" in r for r in runs)


def test_names_only_commands_that_exist():
    setup = re.search(r"```bash\n(.+?)\n", README).group(1)
    for job in (FUZZ, SUMMARY, JOBS["engine"]):
        assert _runs(job)[0] == setup, "the workflow sets up exactly as README does"
    runs = [r.replace('"$SHARD"', "1/2") for job in JOBS.values() for r in _runs(job)]
    tpargmax = [shlex.split(r) for r in runs if r.startswith(".venv/bin/tpargmax ")]
    assert {args[1] for args in tpargmax} == {"fuzz", "fuzz-summary", "install-vllm", "e2e"}
    for args in tpargmax:
        build_parser().parse_args(args[1:])  # exits with a usage error if the command or an option is unknown


def test_the_engine_runs_end_to_end_nightly_in_its_own_environment():
    """vLLM goes into the engine job's venv, never the fuzz workers'; the properties run with their self-test and
    the database on, and the finds are uploaded whatever the outcome."""
    runs = _runs(JOBS["engine"])
    assert runs.index(".venv/bin/tpargmax install-vllm") < next(i for i, r in enumerate(runs) if " e2e " in r)
    (e2e,) = [shlex.split(r) for r in runs if " e2e " in r]
    assert "--self-test" in e2e and e2e[e2e.index("--profile") + 1] == "nightly"
    uploads = [(s, w) for s, w in zip(JOBS["engine"]["steps"], _uses(JOBS["engine"]), strict=True) if "upload" in w[0]]
    assert uploads and uploads[0][0]["if"] == "always()"
    assert e2e[e2e.index("--repro-dir") + 1].startswith(uploads[0][1][1]["path"])
    assert not any("install-vllm" in r for job in (FUZZ, SUMMARY) for r in _runs(job))


def test_every_pull_request_runs_readmes_two_commands_as_ci_does():
    assert set(CI[True]) == {"push", "pull_request"} and CI[True]["push"]["branches"] == ["main"]
    (job,) = CI["jobs"].values()
    runs = _runs(job)
    (at,) = [i for i, r in enumerate(runs) if r == ".ci/run"]
    assert any("apt-get install" in r and "redis-server" in r for r in runs[:at])  # .ci/run needs root to install it
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    setup, test = readme_commands(ROOT)
    assert setup in script and test in script  # README's two commands, exactly


def test_the_fleets_database_is_read_only_and_only_where_its_secret_exists():
    (job,) = CI["jobs"].values()
    assert job["env"]["FLEET_DB"] == "${{ secrets.TPARGMAX_DB_URL }}"
    (step,) = [s for s in job["steps"] if "TPARGMAX_DB" in s.get("env", {})]
    assert step["if"] == "env.FLEET_DB != ''"
    assert step["env"] == {"TPARGMAX_DB": "${{ secrets.TPARGMAX_DB_URL }}", "TPARGMAX_DB_READONLY": "1"}
    assert "--hypothesis-profile dev" in step["run"]  # ci is derandomised: no database to read
