"""``tpargmax check-d2t`` on the stored fixtures: the right classification, exit status and offending ids."""

from __future__ import annotations

import json

import pytest
import torch

from tests.d2t_fixtures import HERE, write_all
from tpargmax.checkpoint import read_tensors
from tpargmax.cli import main

EXPECTED = {  # file -> (classification, exit status, words naming the offending ids)
    "eagle3.safetensors": ("strictly increasing", 0, "rises strictly over all 24 draft ids"),
    "prefixed.safetensors": ("strictly increasing", 0, "d2t 'model.d2t'"),
    "state_dict.pt": ("strictly increasing", 0, "d2t 'state_dict.draft.d2t'"),
    "swapped.safetensors": ("non-monotone", 1, "draft ids 5 < 17 map to 112 > 99"),
    "duplicate.safetensors": ("non-injective", 1, "draft ids 12, 13 share target 108"),
    "out_of_range.safetensors": ("out of range", 1, "23 -> 263"),
    "t2d_mismatch.safetensors": ("t2d inconsistent", 1, "target 3: t2d says used, but d2t maps no draft id to it"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check_d2t_on_each_fixture(name, capsys):
    kind, status, words = EXPECTED[name]
    assert main(["check-d2t", str(HERE / name)]) == status
    out = capsys.readouterr().out
    assert f"classification: {kind}\n" in out and words in out, out
    assert f"use_local_argmax_reduction: {'safe' if status == 0 else 'NOT safe'} for this draft" in out
    if kind == "non-monotone":
        assert "the local path returns 112 = 5 + d2t[5], the classic path returns 99" in out


def test_json_output(capsys):
    assert main(["check-d2t", str(HERE / "swapped.safetensors"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "non-monotone" and report["safe"] is False
    assert report["first_inversion"] == [5, 17, 112, 99]
    assert report["counterexample"]["local_token"] == 112 and report["counterexample"]["classic_token"] == 99


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "no such file"),
        (b"not a checkpoint at all", "neither safetensors nor a torch state dict"),
        ("no_d2t.safetensors", "no 'd2t' tensor"),
    ],
)
def test_unreadable_files_exit_2_with_a_message(content, words, tmp_path, capsys):
    path = tmp_path / "draft.bin"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path = HERE / content
    assert main(["check-d2t", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def test_stored_fixtures_are_what_the_builder_makes(tmp_path):
    for path in write_all(tmp_path):
        stored, rebuilt = read_tensors(HERE / path.name), read_tensors(path)
        assert stored.keys() == rebuilt.keys(), path.name
        assert all(torch.equal(stored[k], rebuilt[k]) for k in stored), path.name
