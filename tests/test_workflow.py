"""The nightly workflow is valid YAML, runs on a schedule, carries the database, uploads the finds,
and names only commands that exist."""

from __future__ import annotations

import re
import shlex

import yaml

from tests.suite import ROOT
from tpargmax.cli import build_parser

WORKFLOW = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text(encoding="utf-8"))
TRIGGERS = WORKFLOW[True]  # YAML 1.1, which PyYAML reads, takes the bare key `on` for the boolean true
STEPS = WORKFLOW["jobs"]["fuzz"]["steps"]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_runs_nightly_on_a_schedule():
    (schedule,) = TRIGGERS["schedule"]
    assert len(schedule["cron"].split()) == 5
    assert int(WORKFLOW["jobs"]["fuzz"]["timeout-minutes"]) <= 120


def test_restores_and_saves_the_database_and_uploads_the_finds():
    uses = [(s.get("uses", ""), s.get("with", {})) for s in STEPS]
    assert any(u.startswith("actions/cache/restore@") and w["path"] == ".hypothesis/examples" for u, w in uses)
    assert any(u.startswith("actions/cache/save@") and w["path"] == ".hypothesis/examples" for u, w in uses)
    uploaded = " ".join(w["path"] for u, w in uses if u.startswith("actions/upload-artifact@"))
    assert ".hypothesis/examples" in uploaded and "repro/" in uploaded and "fuzz-log.jsonl" in uploaded
    names = [w.get("name") for u, w in uses if u.startswith("actions/upload-artifact@")]
    assert "hypothesis-example-db" in names  # GitHubArtifactDatabase's default artifact name


def test_names_only_commands_that_exist():
    runs = [s["run"] for s in STEPS if "run" in s]
    setup = re.search(r"```bash\n(.+?)\n", README).group(1)
    assert runs[0] == setup, "the workflow sets up exactly as README does"
    tpargmax = [shlex.split(r) for r in runs if r.startswith(".venv/bin/tpargmax ")]
    assert tpargmax and any(args[1] == "fuzz" for args in tpargmax)
    for args in tpargmax:
        build_parser().parse_args(args[1:])  # exits with a usage error if the command or an option is unknown
