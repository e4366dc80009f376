"""``tpargmax install-ascend`` and the loader under vllm-ascend's subjects, without the network or the sdist: the
pinned hash refuses other bytes and leaves nothing behind, the extraction keeps Python files alone and refuses paths
out of its folder, ``--from`` records a checkout or names what it lacks, and a file's engine imports are left out
while its own functions run with the names given."""

from __future__ import annotations

import argparse
import io
import json
import tarfile
import textwrap
from pathlib import Path

import pytest

from engines.ascend.wheel import source
from engines.source_functions import source_functions
from tpargmax.install import ascend


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(source, "RECORD", tmp_path / "vllm-ascend.json")
    monkeypatch.setattr(ascend, "RECORD", tmp_path / "vllm-ascend.json")
    monkeypatch.setattr(ascend, "HOME", tmp_path)
    return tmp_path


def _checkout(root: Path, version: str = "0.23.0.post1") -> Path:
    for rel in source.FILES.values():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("import torch_npu\n")
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: vllm_ascend\nVersion: {version}\n")
    return root


def _sdist(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _run(**options: object) -> int:
    return ascend.install_ascend(argparse.Namespace(**{"dry_run": False, "source": None, **options}))


def test_dry_run_fetches_and_writes_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ascend.install_ascend(argparse.Namespace(dry_run=True, source=None)) == 0
    assert source.SDIST_SHA256 in capsys.readouterr().out
    assert list(home.iterdir()) == []


def test_a_checkout_is_recorded_and_a_folder_that_is_not_one_is_named(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(source=str(tmp_path / "nothing")) == 1
    assert "not a vllm-ascend checkout" in capsys.readouterr().err
    root = _checkout(tmp_path / "checkout", version="0.24.0rc1.dev3")
    assert _run(source=str(root)) == 0
    assert json.loads((home / "vllm-ascend.json").read_text()) == {
        "root": str(root),
        "version": "0.24.0rc1.dev3",
        "origin": "checkout",
    }
    assert source.why_unavailable() is None and source.version() == "0.24.0rc1.dev3"


def test_without_a_record_the_subjects_say_what_to_run(home: Path) -> None:
    assert source.why_unavailable() == source.INSTALL_HINT
    (home / "vllm-ascend.json").write_text('{"root": "/nowhere"}')
    assert "lacks vllm_ascend/sample/sampler.py" in source.why_unavailable()


def test_other_bytes_than_the_pinned_hash_are_refused_and_removed(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ascend.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"not the sdist"))
    assert _run() == 1
    assert "not the pinned" in capsys.readouterr().err
    assert sorted(p.name for p in home.iterdir()) == []


def test_the_extraction_keeps_python_files_and_checks_the_version(tmp_path: Path) -> None:
    top = ascend.TOP
    members = {
        f"{top}/PKG-INFO": "Version: 0.23.0.post1\n",
        f"{top}/vllm_ascend/sample/sampler.py": "x = 1\n",
        f"{top}/csrc/kernel.cpp": "int main;\n",
        f"{top}/setup.py": "raise SystemExit\n",
    }
    root = ascend._extract(_sdist(tmp_path / "a.tar.gz", members), tmp_path / "out")
    kept = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert kept == ["PKG-INFO", "vllm_ascend/sample/sampler.py"]
    members[f"{top}/PKG-INFO"] = "Version: 0.23.0\n"
    with pytest.raises(ValueError, match="version 0.23.0, not 0.23.0.post1"):
        ascend._extract(_sdist(tmp_path / "b.tar.gz", members), tmp_path / "out")


def test_a_member_that_climbs_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    top = ascend.TOP
    bad = {f"{top}/vllm_ascend/../../../escaped.py": "x = 1\n", f"{top}/PKG-INFO": "Version: 0.23.0.post1\n"}
    with pytest.raises(tarfile.TarError):
        ascend._extract(_sdist(tmp_path / "c.tar.gz", bad), tmp_path / "out")
    assert not (tmp_path / "escaped.py").exists()


def test_source_functions_leave_the_engine_out_and_keep_what_is_asked(tmp_path: Path) -> None:
    path = tmp_path / "engine_file.py"
    path.write_text(
        textwrap.dedent(
            """\
            import torch_npu
            from vllm.distributed import get_tp_group
            import math

            def kept(x):
                from vllm_ascend.utils import helper
                return helper(x) + math.floor(get_tp_group())

            def left_out():
                raise AssertionError

            class Sampler(Base):
                @staticmethod
                def pick(x):
                    return -x

                def other(self):
                    raise AssertionError
            """
        )
    )
    given = {"get_tp_group": lambda: 2.5, "helper": lambda x: 10 * x}
    module = source_functions(
        "tpargmax_test_engine_file", path, ("kept", "Sampler.pick"), given, ("vllm", "vllm_ascend", "torch_npu")
    )
    assert module.kept(1) == 12
    assert module.Sampler.pick(3) == -3
    assert not hasattr(module, "left_out") and not hasattr(module.Sampler, "other")
    with pytest.raises(RuntimeError, match="defines no"):
        source_functions("tpargmax_test_engine_file2", path, ("missing",), given, ("vllm",))
