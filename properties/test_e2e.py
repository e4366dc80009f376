"""vLLM's engine end to end: speculative decoding with ``use_local_argmax_reduction`` on and off (docs/vllm.md).

Collected only with ``--e2e`` (``tpargmax e2e`` runs it), in vLLM's environment (``tpargmax install-vllm``), in one
process: one engine per (method, tp, switch, dtype), started once and reused by every example, which writes new
weights for it (``engines.vllm.e2e.checkpoints``).  Greedy speculative decoding is lossless, so a wrong draft token
never reaches the output: the properties read the draft tokens inside the workers and the acceptance counters.
Every planted case runs first, pinned (``planted_scenarios``); an engine that dies is judged by what its heads
returned before it did (``checks.generated``), and the pool starts it again for the next example.
"""

from __future__ import annotations

from hypothesis import given

from engines.vllm.e2e.engine import Engine, EngineSpec
from engines.vllm.e2e.pool import EnginePool, group_of
from properties.e2e import checks
from properties.strategies import scenarios, with_planted_scenarios


def engine(pool: EnginePool, spec: EngineSpec, method: str | None = None) -> Engine:
    """The engine ``spec``; one without speculation serves ``method``'s group."""
    return pool.get(spec, group_of(spec.dtype, spec.method or method))


@given(scenario=scenarios())
@with_planted_scenarios()
def test_draft_tokens(engine_pool, engine_spec, scenario):
    """Every draft token, at every step and position, is a target id below the logits vocabulary, the same on
    every rank, and the oracle's on the hidden states, head shards and d2t the engine handed the draft's head."""
    checks.check_draft_tokens(checks.generated(engine(engine_pool, engine_spec), scenario, None))


@given(scenario=scenarios())
@with_planted_scenarios()
def test_lossless(engine_pool, engine_spec, scenario):
    """The engine's tokens are those of the same target without speculation, at the same tp."""
    run = checks.generated(engine(engine_pool, engine_spec), scenario, checks.LOSSLESS)
    alone = engine(engine_pool, EngineSpec(engine_spec.dtype, None, engine_spec.tp), engine_spec.method)
    checks.check_lossless(run, alone.run(scenario, target_of=engine_spec.method))


@given(scenario=scenarios())
@with_planted_scenarios()
def test_same_drafts(engine_pool, e2e_group, scenario):
    """Every proposal is the same with the switch on and off, and at tp 1 and 2."""
    specs = [spec for spec in group_of(*e2e_group) if spec.method]
    checks.check_same_drafts([checks.generated(engine(engine_pool, s), scenario, checks.SAME_DRAFTS) for s in specs])


@given(scenario=scenarios(exact=True, aligned=True))
@with_planted_scenarios(exact=True, aligned=True)
def test_exact_acceptance(engine_pool, engine_spec, scenario):
    """A draft built to predict the target exactly has every draft token accepted, by vLLM's own counters."""
    checks.check_exact_acceptance(checks.generated(engine(engine_pool, engine_spec), scenario, checks.EXACT_ACCEPTANCE))
