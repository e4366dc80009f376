"""vLLM's engine end to end, the checks on runs recorded by hand (what a probe in vLLM's workers writes, a run that
died among them) and the repro files they write; no vLLM needed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from engines.safetensors_file import save
from engines.vllm.e2e import checkpoints
from engines.vllm.e2e.engine import EngineDied, EngineSpec, Generated
from engines.vllm.e2e.scenario import SIZES, Scenario
from properties.e2e import checks
from properties.e2e.probe import Drafting, ProbeMismatch
from properties.failures import PropertyFailure
from properties.oracle import answer
from properties.repro import e2e_records
from tests.test_e2e_pieces import without_vllm

# -- the checks, on a run recorded by hand: what a probe in vLLM's workers writes --------------------------------


HALF = checkpoints.boundary(SIZES.draft_vocab)  # rows per rank of EAGLE3's head at tp 2
SUFFIX = Scenario(seed=7, exact=True, plants=("ties_across_ranks", "winners_across_ids"), d2t="suffix", norm="uniform",
                  prompts=((3, 4), (5,)), max_tokens=5)  # fmt: skip


def recorded(tmp_path: Path, tokens_of=None, *, outputs=None, counters=None, scenario=SUFFIX) -> Generated:
    """An EAGLE3 run at tp 2 of one step of three calls on two rows, written as the probe writes it; the tokens
    are the oracle's unless ``tokens_of(inputs, want)`` says otherwise."""
    return _written(tmp_path, scenario, tokens_of, outputs=outputs, counters=counters)


def died(tmp_path: Path, head_of, scenario=SUFFIX, tokens=(10, 20)) -> EngineDied:
    """The same run, its proposal raising at the third call, whose head returned ``head_of(inputs, draft ids the
    oracle wants)`` (before d2t): no outputs, no proposal, the calls and what was raised, as the probe writes them."""
    run = _written(tmp_path, scenario, None, head_of=head_of, tokens=tokens)
    return EngineDied("vLLM engine eagle3-tp2-on-float32 refused generate: EngineDeadError", run)


def _written(tmp_path, scenario, tokens_of, *, outputs=None, counters=None, head_of=None, tokens=(10, 20)):
    plan = checkpoints.plan_tensors(scenario, "eagle3")["draft"]
    padded = torch.cat([plan["lm_head.weight"], torch.zeros(2 * HALF - SIZES.draft_vocab, SIZES.hidden)])
    hidden = checkpoints.plan_tensors(scenario, "eagle3")["target"]["model.embed_tokens.weight"][list(tokens)]
    head = {"tp": 2, "org_vocab": SIZES.draft_vocab, "logits_vocab": SIZES.draft_vocab, "dtype": "float32",
            "scale": checkpoints.EAGLE3_LOGIT_SCALE, "soft_cap": None, "target_vocab": SIZES.vocab}  # fmt: skip
    step = {"step": 0, "req_ids": ["0-a", "1-b"], "calls": 3}
    if head_of is not None:
        step["died"] = "IndexError: index 2303 is out of bounds for dimension 0 with size 2300"
    meta = {"steps": [step], "verified": [{"0-a": [-1, -1, -1]}]}
    paths = [tmp_path / f"rank{r}.safetensors" for r in range(2)]
    tmp_path.mkdir(parents=True, exist_ok=True)

    def write(drafts: torch.Tensor, heads: torch.Tensor) -> None:
        for r, path in enumerate(paths):
            tensors = {"head": padded[HALF * r : HALF * (r + 1)], "d2t": plan["d2t"]}
            tensors |= {"step0.drafts": drafts} if head_of is None else {}
            for c in range(3):
                tensors |= {f"step0.call{c}.hidden": hidden * (c + 1), f"step0.call{c}.head": heads[:, c]}
                if head_of is None or c < 2:
                    tensors[f"step0.call{c}.tokens"] = drafts[:, c]
            probe = {**meta, "head": {**head, "start": HALF * r, "rows_per_rank": HALF}}
            save(tensors, path, {"probe": json.dumps(probe)})

    zeros = torch.zeros(2, 3, dtype=torch.int64)
    write(zeros, zeros)
    run = Generated(
        EngineSpec("float32", "eagle3", 2, True),
        scenario,
        ([] if head_of else outputs or [[9, 9, 9, 9, 9], [8, 8, 8, 8, 8]]),
        [] if head_of else ["0", "1"],
        {} if head_of else counters or {"drafts": 1, "draft_tokens": 3, "accepted": 0},
        paths,
        1.0,
    )
    drafting = Drafting(run)
    columns, heads = [], []
    for c, call in enumerate(drafting.calls):
        inputs = drafting.inputs(call)
        want = answer(inputs).tokens
        columns.append(want if tokens_of is None else tokens_of(inputs, want))
        draft = want - inputs.d2t[0]  # suffix: one offset for every id
        heads.append(head_of(inputs, draft) if head_of is not None and c == 2 else draft)
    write(torch.stack(columns, dim=1), torch.stack(heads, dim=1))
    return run


def test_the_oracles_draft_tokens_pass(tmp_path):
    checks.check_draft_tokens(recorded(tmp_path))


def test_a_winner_without_its_ranks_offset_is_named(tmp_path):
    def without_offset(inputs, want):
        draft = (want - inputs.d2t[0]).clone()  # suffix: one offset for every id
        return torch.where(draft >= HALF, draft - HALF, draft) + inputs.d2t[0]

    with pytest.raises(PropertyFailure) as failed:
        checks.check_draft_tokens(recorded(tmp_path, without_offset))
    assert str(failed.value).startswith("[global id without its rank's offset: draft id ")


def test_a_draft_token_outside_the_target_vocabulary_breaks_the_contract(tmp_path):
    with pytest.raises(PropertyFailure) as failed:
        checks.check_draft_tokens(recorded(tmp_path, lambda inputs, want: want * 0 + SIZES.vocab))
    assert f"property: {checks.DRAFT_TARGETS}" in str(failed.value)


def test_a_head_layout_other_than_the_suites_is_not_a_verdict(tmp_path):
    run = recorded(tmp_path)
    path = run.records[1]
    with safe_open(str(path), "pt") as f:
        meta, tensors = json.loads(f.metadata()["probe"]), {k: f.get_tensor(k) for k in f.keys()}
    meta["head"]["start"] = 100
    save(tensors, path, {"probe": json.dumps(meta)})
    with pytest.raises(ProbeMismatch, match=f"the suite's layout says {HALF}"):
        checks.check_draft_tokens(run)


def test_placeholders_are_left_out_of_the_acceptance_and_a_rejection_is_named(tmp_path):
    ok = {"drafts": 2, "draft_tokens": 6, "accepted": 3}  # 3 placeholders in the record
    checks.check_exact_acceptance(recorded(tmp_path, counters=ok))
    with pytest.raises(PropertyFailure, match=r"2 accepted of 6 draft tokens, 3 of them placeholders"):
        checks.check_exact_acceptance(recorded(tmp_path, counters={**ok, "accepted": 2}))


def test_lossless_and_same_drafts_name_what_differs(tmp_path):
    run = recorded(tmp_path)
    with pytest.raises(PropertyFailure, match=r"prompt 1, token 2: 8 with speculation, 7 without"):
        checks.check_lossless(run, replace(run, outputs=[run.outputs[0], [8, 8, 7, 8, 8]]))
    other = recorded(tmp_path / "other", lambda inputs, want: want.flip(0))
    with pytest.raises(PropertyFailure) as failed:
        checks.check_same_drafts([run, other])
    assert str(failed.value).startswith("[draft tokens differ between engines]")
    assert ", draft position 0: drafted " in str(failed.value)  # the oracle names the engine that went wrong


def test_an_engine_that_died_of_a_padding_id_is_judged_by_what_its_heads_returned(tmp_path):
    death = died(tmp_path, lambda inputs, draft: draft * 0 + SIZES.draft_vocab + 1)
    with pytest.raises(PropertyFailure) as failed:
        checks.check_death(death, checks.LOSSLESS)
    message = str(failed.value)
    assert message.startswith(f"[padding returned: {SIZES.draft_vocab + 1} is padding row 1 of rank 1]"), message
    assert f"property: {checks.LOSSLESS}" in message  # the property that ran, so that its repro file reruns it
    assert "step 0, the request of prompt 0, draft position 2: the draft's head returned" in message
    assert "the engine then died: IndexError: index 2303 is out of bounds" in message
    assert failed.value.repro["property"] == checks.LOSSLESS


@pytest.mark.parametrize(
    "head_of, words",
    [
        (lambda inputs, draft: draft * 0 + 2 * HALF + 5, f"[id past d2t: {2 * HALF + 5} is past the head's"),
        (lambda inputs, draft: draft.flip(0), "["),  # a real row, the wrong one: the oracle's rule, through d2t
    ],
)
def test_a_death_names_the_rule_of_the_call_that_raised(tmp_path, head_of, words):
    with pytest.raises(PropertyFailure) as failed:
        checks.check_death(died(tmp_path, head_of))
    message = str(failed.value)
    assert message.startswith(words) and "draft position 2" in message and "the engine then died" in message


def test_an_id_rounded_past_the_heads_rows_is_named_for_its_rounding(tmp_path):
    """Token 4249 is the target of draft id 2049, whose embedding ``winners_across_ids`` points at draft id 2299,
    the last: carried in bfloat16 it comes back as 2304, past every row, and vLLM dies indexing d2t with it."""
    death = died(tmp_path, lambda inputs, draft: draft.float().to(torch.bfloat16).long(), tokens=(10, 4249))
    with pytest.raises(PropertyFailure) as failed:
        checks.check_death(death)
    lines = str(failed.value).splitlines()
    assert lines[0] == "[id carried in bfloat16: 2299 rounds to 2304]", lines
    assert "  id past d2t: 2304 is past the head's 2304 rows and d2t's 2300 entries" in lines


def test_a_death_the_records_do_not_explain_is_the_engines_error(tmp_path):
    """The heads returned the oracle's ids: no rule, so ``generated`` raises the engine's own failure."""
    death = died(tmp_path, lambda inputs, draft: draft)
    checks.check_death(death)  # returns: nothing to name

    class Dying:
        def run(self, scenario, target_of=None):
            raise death

    with pytest.raises(EngineDied):
        checks.generated(Dying(), SUFFIX, checks.DRAFT_ORACLE)


def test_ranks_that_disagree_before_d2t_are_named(tmp_path):
    run = recorded(tmp_path)
    path = run.records[1]
    with safe_open(str(path), "pt") as f:
        meta, tensors = json.loads(f.metadata()["probe"]), {k: f.get_tensor(k) for k in f.keys()}
    tensors["step0.call1.head"] = tensors["step0.call1.head"] + 1
    save(tensors, path, {"probe": json.dumps(meta)})
    with pytest.raises(PropertyFailure, match=r"draft position 1: ids before d2t: rank 0 returned \d+, rank 1"):
        checks.check_draft_tokens(run)


# -- repro files ------------------------------------------------------------------------------------------------


def failure_of(tmp_path: Path) -> dict:
    with pytest.raises(PropertyFailure) as failed:
        checks.check_draft_tokens(recorded(tmp_path, lambda inputs, want: want.flip(0)))
    return failed.value.repro


def test_an_end_to_end_failure_writes_a_record_that_reads_back(tmp_path):
    path = e2e_records.write(tmp_path, failure_of(tmp_path), None, "test_draft_tokens")
    assert path.parent == tmp_path / "e2e"
    record, scenario, specs, plant = e2e_records.read(path)
    assert specs == [EngineSpec("float32", "eagle3", 2, True)] and plant is None
    assert scenario.plants == SUFFIX.plants and record["property"] == checks.DRAFT_ORACLE


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda r: r.update(property="x"), "'property' must be one of"),
        (lambda r: r.update(engines=[]), "'engines' must list 1 engine(s)"),
        (lambda r: r["engines"][0].update(tp=3), "EngineSpec: dtype in"),
        (lambda r: r["engines"][0].update(switch="yes"), "an engine's tp is an int and its switch true or false"),
        (lambda r: r["scenario"].update(max_tokens=10**6), "Scenario field 'max_tokens' must be an int in"),
        (lambda r: r["scenario"].update(prompts=[[SIZES.vocab]]), "Scenario field 'prompts' must be"),
        (lambda r: r["scenario"].pop("seed"), "a scenario is an object with exactly the fields"),
        (lambda r: r.update(plant="os.system('x')"), "'plant' must be null or a planted bug's name"),
        (lambda r: r.update(format="tpargmax-repro/2"), "not a tpargmax-e2e-repro/1 file"),
    ],
)
def test_a_damaged_record_is_refused_in_one_line(tmp_path, change, words):
    path = e2e_records.write(tmp_path, failure_of(tmp_path), None, "test_draft_tokens")
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")) as refused:
        e2e_records.read(path)
    assert "\n" not in str(refused.value)


def test_replaying_a_record_without_vllm_exits_2_in_one_line(tmp_path, monkeypatch, capsys):
    from tpargmax.cli import main

    path = e2e_records.write(tmp_path, failure_of(tmp_path), None, "test_draft_tokens")
    without_vllm(monkeypatch)
    assert main(["repro", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"tpargmax repro: {path}: it runs vLLM 0.32.0's engine, which is not installed here: tpargmax install-vllm"
    )
