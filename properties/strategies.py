"""Strategies draw structure (sizes, tp, plans, a seed), never tensor elements.

Sizes are drawn by class so that most examples are small and fast while large
vocabularies (up to 262144) and padding-only ranks still appear.  Heads carry
added ids half the time, a logits vocabulary below the head's ids half the time,
and padding to 64, 128 or 96 rows, at every tp up to 8 that the head admits; the named edge
cases are pinned with ``@example`` through :func:`with_edge_cases`.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from hypothesis import example
from hypothesis import strategies as st

from engines.vllm.e2e.scenario import D2T_PLANS as E2E_D2T_PLANS
from engines.vllm.e2e.scenario import NORMS, PLANTS, SIZES, Scenario
from properties.cases.case import D2T_PLANS, DTYPES, PADDING_PLANS, SPECIAL_PLANS, SPREAD_HIDDEN, TIE_PLANS, Case
from properties.cases.rank_inputs import DP_RULES
from reference.head import DEFAULT_PADDING_SIZE, SHARD_RULES, padded_sizes

REAL_VOCABS = (32000, 32001, 128256, 151936, 262144)
PADDING_SIZES = (64, 64, 128, 96)  # vLLM's default twice as often; 96 admits tp 3 and 6
MAX_TP = 8
MAX_K = 8  # tree drafting's top-k widths
ADDED_PLANS = ("added_tie", "added_max")  # planted only where added ids are tokens: twice as likely there

# The strategies a case draws from, built once: building them per draw was a quarter of a property's time.
_SIZE, _QUARTER, _SEED = st.integers(0, 99), st.integers(0, 3), st.integers(0, 2**32 - 1)
_VOCABS = (st.integers(1, 130), st.integers(131, 4096), st.integers(4097, 40000), st.sampled_from(REAL_VOCABS))
_FEW_ADDED, _MANY_ADDED = st.integers(1, 16), st.integers(17, 300)
_PADDING_SIZE = st.sampled_from(PADDING_SIZES)
_SOFT_CAP = st.sampled_from((None, None, None, None, 1.0, 4.0, 30.0, 50.0))  # none half the time, one choice
_SATURATING_CAP = st.sampled_from((1.0, 2.0, 4.0, 8.0))
_SCALE = st.sampled_from((1.0, 0.5, 0.125, 3.0))
_D2T, _DTYPE, _PADDING = st.sampled_from(D2T_PLANS), st.sampled_from(tuple(DTYPES)), st.sampled_from(PADDING_PLANS)
_WEIGHTS, _BOOL = st.sampled_from(("int", "normal")), st.booleans()


@lru_cache(maxsize=4096)  # sizes, paddings, and three times a vocabulary
def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@lru_cache(maxsize=4096)
def _tps(base: int, added_rows: int) -> st.SearchStrategy[int]:
    """The tps up to ``MAX_TP`` that divide both the base and the added part of the padded head."""
    return st.sampled_from([t for t in range(1, MAX_TP + 1) if base % t == 0 and added_rows % t == 0])


_FOUR_PLANS = st.integers(0, 255)  # two bits a plan; Hypothesis draws 8 bits uniformly, wider integers small-biased


def _plans(draw: st.DrawFn, names: tuple[str, ...], likely: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Each plan on with probability 1/4, those in ``likely`` 1/2, from two bits of one choice per four plans (a
    choice per plan was two fifths of a case's choices, and a choice costs Hypothesis more than a plan does); the
    first plan in the lowest bits, so a failure shrinks to the fewest and first plans it needs.  Every case makes
    as many choices."""
    on = []
    for first in range(0, len(names), 4):
        bits = draw(_FOUR_PLANS)
        on += [name for i, name in enumerate(names[first : first + 4]) if (bits >> 2 * i) & 3 >= (3 - (name in likely))]
    return tuple(on)


@st.composite
def cases(draw: st.DrawFn, *, int_weights: bool = False, spread: bool = False) -> Case:
    """Any valid :class:`Case`; ``int_weights`` keeps arithmetic exact (for invariance checks); ``spread`` draws the
    sampling properties' cases: few rows boosted, specials on a minority of rows (``Case.spread``).

    Every draw happens unconditionally, so all cases consume the same number of
    choices: Hypothesis's target phase then mutates them without overrunning.
    """
    size = draw(_SIZE)
    if size < 35:  # tiny: whole ranks of padding at tp >= 2
        vocab, max_batch, max_hidden = draw(_VOCABS[0]), 64, 32
    elif size < 85:
        vocab, max_batch, max_hidden = draw(_VOCABS[1]), 32, 32
    elif size < 96:
        vocab, max_batch, max_hidden = draw(_VOCABS[2]), 8, 8
    else:
        vocab, max_batch, max_hidden = draw(_VOCABS[3]), 2, 4
    # none (half the time), few or many added ids, then as many cut off the logits vocabulary: a size is drawn
    # whatever the kind, one choice (not one per kind), so that every case makes as many choices
    added_kind = draw(_QUARTER)
    added_size = draw(_MANY_ADDED if added_kind == 3 else _FEW_ADDED)
    added = added_size if added_kind >= 2 else 0
    padding_size = draw(_PADDING_SIZE)
    full = vocab + added
    cut_kind = draw(_QUARTER)
    cut = draw(_ints(padding_size + 1, 3 * padding_size) if cut_kind == 3 else _ints(1, padding_size))
    logits_vocab = max(1, full - cut) if cut_kind >= 2 else full
    base, total = padded_sizes(vocab, added, padding_size)
    tp = draw(_tps(base, total - base))
    ties = _plans(draw, TIE_PLANS, likely=ADDED_PLANS if added else ())  # they need added ids: rare meetings
    specials = _plans(draw, SPECIAL_PLANS)
    soft_cap = draw(_SATURATING_CAP if "softcap_saturation" in ties else _SOFT_CAP)
    scale = draw(_SCALE)
    d2t = draw(_D2T)
    target_extra = draw(_ints(0, 3 * vocab))
    return Case(
        batch=draw(_ints(1, max_batch)),
        hidden=draw(_ints(SPREAD_HIDDEN, max(SPREAD_HIDDEN, max_hidden)) if spread else _ints(3, max_hidden)),
        vocab=vocab,
        tp=tp,
        added=added,
        padding_size=padding_size,
        logits_vocab=None if logits_vocab == full else logits_vocab,
        dtype=draw(_DTYPE),
        seed=draw(_SEED),
        weights="int" if int_weights else draw(_WEIGHTS),
        bias=draw(_BOOL) or bool(specials),
        scale=0.5 if "signed_zero" in specials else scale,
        soft_cap=soft_cap,
        ties=ties,
        specials=specials,
        padding=draw(_PADDING),
        d2t=d2t,
        target_extra=0 if d2t == "none" else target_extra,
        spread=spread,
    )


_ULPS, _NEAR = st.sampled_from((1, 2, 4, 16)), st.sampled_from(("across_ranks", "shard_boundary", "fp32_near_tie"))
_UNEVEN, _DP, _SPLIT_TP = st.sampled_from(SHARD_RULES[1:]), st.sampled_from(DP_RULES[1:]), st.integers(2, MAX_TP)


@st.composite
def layout_cases(draw: st.DrawFn, layout: str) -> Case:
    """A :func:`cases` case laid out as ``layout``: ``diverged`` (the ranks' copies of the hidden states a few ulps
    apart, with a tie planted where it matters: across ranks or the shard boundary), ``dp`` (attention data
    parallel's row segments) or ``uneven`` (base ids cut into shards of unequal width, tp 2 to 8, a tie at the
    boundary likely).  Every draw happens, whatever the layout, as in :func:`cases`."""
    case = draw(cases())
    near, ulps, rule, dp, tp = draw(_NEAR), draw(_ULPS), draw(_UNEVEN), draw(_DP), draw(_SPLIT_TP)
    ties = tuple(p for p in TIE_PLANS if p in case.ties or p == near)
    if layout == "diverged":
        return replace(case, hidden=max(case.hidden, 4), ties=ties, rank_ulps=ulps)
    if layout == "dp":
        return replace(case, dp=dp)
    vocab = max(case.vocab, MAX_TP)
    cut = case.logits_vocab if case.logits_vocab is not None and case.logits_vocab < vocab else None
    return replace(
        case, vocab=vocab, added=0, logits_vocab=cut, padding_size=DEFAULT_PADDING_SIZE, tp=tp, shards=rule, ties=ties
    )


# The named edge cases, pinned so every run checks them first.
EDGE_CASES = (
    Case(batch=4, hidden=4, vocab=7, tp=2, bias=True, specials=("all_negative",)),  # rank 1 is padding only
    Case(batch=4, hidden=4, vocab=7, tp=8, padding="above_max"),  # 7 padding-only ranks
    Case(batch=8, hidden=6, vocab=1000, tp=4, ties=("across_ranks",), seed=1),
    Case(batch=8, hidden=6, vocab=1000, tp=4, ties=("within_shard",), seed=2),
    Case(batch=8, hidden=6, vocab=200, tp=2, ties=("shard_boundary",), padding="copy_max", seed=3),
    Case(batch=4, hidden=5, vocab=300, tp=4, ties=("whole_row",), dtype="bfloat16"),
    Case(batch=4, hidden=5, vocab=500, tp=4, ties=("softcap_saturation",), soft_cap=2.0, seed=4),
    Case(batch=8, hidden=256, vocab=4096, tp=2, weights="normal", ties=("fp32_near_tie",), seed=11),  # TF32's trap
    Case(batch=4, hidden=5, vocab=500, tp=4, bias=True, scale=0.5, specials=("signed_zero",), seed=5),
    Case(batch=4, hidden=5, vocab=700, tp=4, bias=True, specials=("nan_ranks",), d2t="eagle3", target_extra=900),
    Case(batch=4, hidden=5, vocab=90, tp=2, bias=True, specials=("neg_inf_rows",), d2t="zeros", target_extra=10),
    Case(batch=4, hidden=5, vocab=300, tp=2, bias=True, specials=("subnormal", "huge"), dtype="float16", seed=6),
    Case(batch=3, hidden=4, vocab=32001, tp=4, dtype="bfloat16", padding="nan", d2t="eagle3", target_extra=4000),
    Case(
        batch=2,
        hidden=4,
        vocab=151936,
        tp=8,
        dtype="bfloat16",
        ties=("across_ranks",),
        d2t="eagle3",
        target_extra=20000,
        seed=7,
    ),
    Case(batch=1, hidden=3, vocab=1, tp=1),
    # added ids and ids beyond the logits vocabulary, every one of them a trap
    Case(
        batch=4, hidden=5, vocab=1000, tp=4, added=40, padding_size=128, logits_vocab=990, padding="above_max", seed=8
    ),
    # vLLM's docstring head: every added id on rank 0, tied with a smaller base id on rank 1
    Case(batch=4, hidden=5, vocab=1010, tp=2, added=16, ties=("added_tie",), seed=9),
    # the same tie at +inf: a shortcut for an infinite maximum that takes the lowest rank takes the larger id
    Case(
        batch=4,
        hidden=5,
        vocab=1010,
        tp=2,
        added=16,
        bias=True,
        ties=("added_tie",),
        specials=("inf_at_ties",),
        seed=12,
    ),
    Case(
        batch=4, hidden=5, vocab=500, tp=3, added=100, padding_size=96, ties=("added_max",), padding="copy_max", seed=10
    ),
)


def with_edge_cases(test=None, *, cases: tuple[Case, ...] = EDGE_CASES, **extra):
    """Apply ``@example(case=..., **extra)`` for every pinned edge case (``cases``: a layout's own)."""
    if test is None:
        return lambda fn: with_edge_cases(fn, cases=cases, **extra)
    for case in reversed(cases):
        test = example(case=case, **extra)(test)
    return test


_PROMPT = st.lists(st.integers(0, SIZES.vocab - 1), min_size=1, max_size=12).map(tuple)
_PROMPTS = st.lists(_PROMPT, min_size=1, max_size=4).map(tuple)
_PLANTS = st.sets(st.sampled_from(PLANTS), max_size=3)


@st.composite
def scenarios(draw: st.DrawFn, *, exact: bool | None = None, aligned: bool = False) -> Scenario:
    """An end-to-end example: a model plan (a seed, the cases planted in the heads, EAGLE3's table, the target's
    norm) and the requests.  ``aligned`` lengths end every request on a whole proposal (one token, then
    ``num_speculative_tokens + 1`` per step when every draft is accepted)."""
    exact = draw(_BOOL) if exact is None else exact
    step, planted = SIZES.num_speculative_tokens + 1, draw(_PLANTS)
    return Scenario(
        seed=draw(_SEED),
        exact=exact,
        plants=tuple(p for p in PLANTS if p in planted),
        d2t=draw(st.sampled_from(E2E_D2T_PLANS)),
        norm="uniform" if exact else draw(st.sampled_from(NORMS)),
        prompts=draw(_PROMPTS),
        max_tokens=1 + step * draw(st.integers(1, 4)) if aligned else draw(st.integers(1, 16)),
    )


def planted_scenarios(*, exact: bool = False, aligned: bool = False) -> tuple[Scenario, ...]:
    """One end-to-end example per planted case, each with a table of ``D2T_PLANS`` in turn (so every plan appears),
    and prompts at both ends of the id range: pinned, as the edge cases are, so that no case waits on a draw."""
    step = SIZES.num_speculative_tokens + 1
    return tuple(
        Scenario(
            seed=i,
            exact=exact,
            plants=(plant,),
            d2t=E2E_D2T_PLANS[i % len(E2E_D2T_PLANS)],
            norm="uniform" if exact else NORMS[i % len(NORMS)],
            prompts=((i, 2**11 + 1 + i), (SIZES.vocab - 1 - i,)),
            max_tokens=1 + 2 * step if aligned else 8,
        )
        for i, plant in enumerate(PLANTS)
    )


def with_planted_scenarios(*, exact: bool = False, aligned: bool = False):
    """Apply ``@example(scenario=...)`` for each of :func:`planted_scenarios`: run before the drawn ones."""

    def pin(test):
        for scenario in reversed(planted_scenarios(exact=exact, aligned=aligned)):
            test = example(scenario=scenario)(test)
        return test

    return pin
