"""``tpargmax check-d2t`` on the stored fixtures: the right classification, exit status and offending ids."""

from __future__ import annotations

import json

import pytest
import torch

from tests.d2t_fixtures import FORMS, HERE, corrupted, eagle3_tables, write_all, write_draft
from tests.suite import ROOT
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


def bad(tmp_path, how: str) -> str:
    """A damaged copy of a good checkpoint, damaged the way downloads and disks damage them."""
    good = (HERE / "eagle3.safetensors").read_bytes()
    size = int.from_bytes(good[:8], "little")
    header = json.loads(good[8 : 8 + size])
    path = tmp_path / "model.safetensors"
    if how == "truncated":
        path.write_bytes(good[:-40])
    elif how == "header not JSON":
        path.write_bytes(good[:8] + b"{" + b"?" * (size - 1) + good[8 + size :])
    elif how == "offsets outside the file":
        header["t2d"]["shape"], header["t2d"]["data_offsets"][1] = [4096], header["t2d"]["data_offsets"][0] + 4096
        text = json.dumps(header).encode()
        path.write_bytes(len(text).to_bytes(8, "little") + text + good[8 + size :])
    elif how == "index names a missing shard":
        write_draft(tmp_path, TABLES, WEIGHTS, "shards", CONFIG)
        (tmp_path / "model-00001-of-00002.safetensors").unlink()
        return str(tmp_path)
    elif how == "directory without a checkpoint":
        (tmp_path / "config.json").write_text(json.dumps(CONFIG))
        (tmp_path / "README.md").write_text("a model card")
        return str(tmp_path)
    elif how == "index names the wrong shard":
        write_draft(tmp_path, TABLES, WEIGHTS, "shards", CONFIG)
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        index["weight_map"]["d2t"] = "model-00001-of-00002.safetensors"
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
        return str(tmp_path)
    elif how in ("config not JSON", "index not JSON"):
        write_draft(tmp_path, TABLES, WEIGHTS, "shards", CONFIG)
        broken = "config.json" if how == "config not JSON" else "model.safetensors.index.json"
        (tmp_path / broken).write_text('{"vocab_size": 256,')  # cut off mid-download
        return str(tmp_path)
    elif how == "not a checkpoint":
        path = tmp_path / "draft.bin"
        path.write_bytes(b"not a checkpoint at all")
    elif how == "no such file":
        path = tmp_path / "missing.safetensors"
    elif how == "a Hugging Face id":
        return "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    elif how == "no d2t":
        path = HERE / "no_d2t.safetensors"
    return str(path)


BAD = {  # how the file is damaged -> words the one-line reason must hold
    "truncated": "(a truncated download, or offsets outside the file)",
    "header not JSON": "its header is not JSON",
    "offsets outside the file": "tensor offsets do not end where the file ends",
    "index names a missing shard": "names shard 'model-00001-of-00002.safetensors', which is not in",
    "directory without a checkpoint": "no checkpoint in this directory",
    "index names the wrong shard": "the index puts 'd2t' in this shard, but the shard has no such tensor",
    "config not JSON": "config.json: the config is not readable JSON",
    "index not JSON": "model.safetensors.index.json: the shard index is not readable JSON",
    "not a checkpoint": "neither safetensors nor a torch state dict",
    "no such file": "no such file or directory",
    "no d2t": "no 'd2t' tensor",
    "a Hugging Face id": "download it first: hf download yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --local-dir DIR",
}


@pytest.mark.parametrize("how", sorted(BAD))
def test_bad_checkpoints_exit_2_with_a_one_line_reason(how, tmp_path, capsys):
    path = bad(tmp_path, how)
    assert main(["check-d2t", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert BAD[how] in captured.err and "Traceback" not in captured.err, captured.err


CONFIG = {"architectures": ["LlamaForCausalLMEagle3"], "vocab_size": 256, "draft_vocab_size": 24}
TABLES = dict(zip(("d2t", "t2d"), eagle3_tables(), strict=True))  # the good EAGLE3 tables, unprefixed
WEIGHTS = {f"model.layers.{i}.mlp.weight": torch.full((8, 8), float(i)) for i in range(4)}


def swapped_tables() -> dict[str, torch.Tensor]:
    return {f"model.{k}": v for k, v in corrupted()["swapped.safetensors"].items()}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("point_at", ["directory", "file"])
def test_every_download_form_gives_the_same_verdict(form, point_at, tmp_path, capsys):
    directory = write_draft(tmp_path, swapped_tables(), WEIGHTS, form, CONFIG)
    (entry,) = [p for p in directory.iterdir() if p.name.startswith(("model.safetensors", "pytorch_model.bin"))]
    path = str(directory if point_at == "directory" else entry)
    assert main(["check-d2t", path]) == 1
    out = capsys.readouterr().out
    assert f"target vocabulary 256 (from {directory / 'config.json'} vocab_size)" in out, out
    assert "d2t 'model.d2t' (24 draft ids), t2d 'model.t2d' (256 targets)" in out
    assert "classification: non-monotone\n" in out and "mismatch" not in out, out
    assert "the local path returns 112 = 5 + d2t[5], the classic path returns 99" in out


def test_an_index_opens_only_the_shard_that_holds_the_tables(tmp_path, capsys):
    write_draft(tmp_path, swapped_tables(), WEIGHTS, "shards", CONFIG)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"garbage: opening this shard would fail")
    assert main(["check-d2t", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"read: {tmp_path / 'model-00002-of-00002.safetensors'}\n" in out, out


@pytest.mark.parametrize(
    "config, args, status, words",
    [
        ({"vocab_size": 256, "draft_vocab_size": 25}, [], 1, ["d2t has 24 entries, but ", "draft_vocab_size is 25"]),
        ({"vocab_size": 256, "draft_vocab_size": 25}, [], 1, ["t2d marks 24 targets as used, but "]),
        ({"vocab_size": 300, "draft_vocab_size": 24}, [], 1, ["t2d has 256 entries, but ", "vocab_size is 300"]),
        (CONFIG, ["--target-vocab", "512"], 1, ["--target-vocab is 512, but ", "vocab_size is 256"]),
        (
            {"speculators_model_type": "eagle3", "draft_vocab_size": 24, "transformer_layer_config": CONFIG},
            [],
            0,
            ["target vocabulary 256 (from ", "transformer_layer_config.vocab_size)"],
        ),
        (None, [], 0, ["target vocabulary 256 (from t2d's length)"]),
    ],
)
def test_the_config_gives_the_target_vocabulary_and_is_cross_checked(config, args, status, words, tmp_path, capsys):
    write_draft(tmp_path, TABLES, WEIGHTS, "safetensors", config)
    assert main(["check-d2t", str(tmp_path), *args]) == status
    out = capsys.readouterr().out
    assert all(w in out for w in words), out
    verdict = "safe for this draft\n" if status == 0 else "NOT safe for this draft (the tables disagree with the config"
    assert "classification: strictly increasing" in out and f"use_local_argmax_reduction: {verdict}" in out, out


def test_stored_fixtures_are_what_the_builder_makes(tmp_path):
    for path in write_all(tmp_path):
        assert (HERE / path.name).read_bytes() == path.read_bytes(), path.name


def test_the_d2t_page_shows_what_the_command_prints(monkeypatch, capsys):
    command = "$ .venv/bin/tpargmax check-d2t tests/fixtures/d2t/swapped.safetensors\n"
    page = (ROOT / "docs" / "d2t.md").read_text(encoding="utf-8")
    shown = page[page.index(command) + len(command) :].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    main(["check-d2t", "tests/fixtures/d2t/swapped.safetensors"])
    assert capsys.readouterr().out == shown
