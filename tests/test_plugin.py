"""A user's implementation plugs in with --impl, as README shows: correct passes, wrong fails clearly."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from tests.suite import ROOT, run_suite


def test_readme_example_implementation_passes():
    out = run_suite("--impl", "examples.float64_pairs:local_argmax", "properties")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_a_wrong_implementation_fails_with_rule_case_and_replay():
    out = run_suite(
        "--impl",
        "tests.broken:highest_rank_wins",
        "--backend",
        "sim",
        "properties/test_equivalence.py",
        "-k",
        "token_exact",
    )
    assert out.returncode == 1, out.stdout[-3000:]
    assert "[tie across ranks resolved to the higher rank]" in out.stdout
    assert "replay: python -m properties.replay --impl tests.broken:highest_rank_wins" in out.stdout
    replay = shlex.split(out.stdout.rsplit("replay: python -m properties.replay", 1)[1].splitlines()[0])
    replay = ["python", "-m", "properties.replay", *replay]
    assert "tpargmax repro file" in out.stdout and "replay: tpargmax repro " in out.stdout
    assert replay[:3] == ["python", "-m", "properties.replay"]
    again = subprocess.run([sys.executable, *replay[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "tie across ranks resolved to the higher rank" in again.stdout, again.stdout


def test_unknown_impl_is_a_usage_error():
    out = run_suite("--impl", "no_such_module:fn", "properties/test_equivalence.py")
    assert out.returncode == 4
    assert "--impl 'no_such_module:fn': cannot load it" in out.stderr


def test_a_hanging_implementation_fails_fast_naming_the_rank():
    out = run_suite(
        "--impl",
        "tests.broken:last_rank_skips_the_exchange",
        "--collective-timeout",
        "0.5",
        "properties/test_equivalence.py",
        "-k",
        "token_exact",
    )
    assert out.returncode == 1, out.stdout[-3000:]
    assert "never joined" in out.stdout and "ImplementationHung: [hang:" in out.stdout


def test_xfails_file_marks_known_failures(tmp_path):
    xfails = tmp_path / "xfails.txt"
    xfails.write_text("test_token_exact[tests.broken:d2t_skipped  # we map d2t later, outside the reduction\n")
    args = ["--impl", "tests.broken:d2t_skipped", "properties/test_equivalence.py", "-k", "token_exact", "-rx"]
    args += ["--backend", "sim"]
    out = run_suite(*args, "--xfails-file", str(xfails))
    assert out.returncode == 0 and "1 xfailed" in out.stdout and "we map d2t later" in out.stdout, out.stdout
    xfails.write_text("test_token_exact\n")
    out = run_suite(*args, TPARGMAX_XFAILS=str(xfails))
    assert out.returncode == 4 and "give a reason after '#'" in out.stderr


def test_ci_profile_is_the_default_under_ci_and_dev_otherwise():
    for ci, profile in (("true", "ci"), (None, "dev")):
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS")}
        if ci:
            env["CI"] = ci
        cmd = [sys.executable, "-m", "pytest", "-p", "no:xdist", "--collect-only", "properties/test_torch_semantics.py"]
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert f"hypothesis profile: {profile}" in out.stdout, out.stdout


def test_a_dying_rank_on_gloo_is_named_and_the_pool_rebuilt():
    args = ["--impl", "tests.broken:rank_one_dies", "--backend", "gloo", "--collective-timeout", "5"]
    out = run_suite(*args, "properties/test_equivalence.py", "-k", "token_exact or determinism")
    assert out.returncode == 1, out.stdout[-3000:]
    # both tests fail for the death itself: the second one ran on a freshly started pool
    assert out.stdout.count("rank 1 died (SIGKILL)") >= 2 and "2 failed" in out.stdout, out.stdout[-3000:]
