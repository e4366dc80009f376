"""What one end-to-end example is: a model plan (a seed and the cases planted in the heads), prompts and a length.

A :class:`Scenario` is structure; :mod:`engines.vllm.e2e.checkpoints` turns it into weights, deterministically, so
its repr (or its fields, in a repro file) rebuilds the same models anywhere.  It may come from someone else's file,
so it checks its own fields.  The engines' sizes are fixed (:data:`SIZES`): an engine is started once per run and
every example reloads only the weights a plan changes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

# vLLM's speculative methods whose drafts run on the CPU; draft_model_hetero is draft_model with a tokenizer of its
# own, under use_heterogeneous_vocab (engines.vllm.e2e.vocabularies)
METHODS = ("eagle3", "eagle", "draft_model", "draft_model_hetero")
HETERO = "draft_model_hetero"
VLLM_METHOD = {HETERO: "draft_model"}  # the method vLLM is given, where it is not the suite's name
# Cases planted in the draft's head (and the target's, where the draft shares or copies it): where vLLM's causes
# live.  Rows straddle the tp=2 shard boundary, so the same plan ties within a shard at tp 1 and across ranks at 2.
PLANTS = (
    "ties_across_ranks",  # rows copied from below the tp=2 boundary to above it: every logit of theirs ties
    "ties_in_shard",  # rows copied within one half
    "nan_rows",  # a NaN weight on a row of each half: the first NaN must win, whatever the rest
    "inf_rows",  # +inf weights on rows of each half: ties at +inf (or -inf, by the hidden state's sign)
    "all_negative",  # every row reads the constant feature with a negative weight: unmasked padding (0) would win
    "zero_rows",  # rows of zeros: with all_negative, ties at 0 across ranks
    "winners_across_ids",  # strong rows at the ids float types round (past 2**8, 2**11), the ranks' ends, the last id
    "near_ties_across_ranks",  # rows across ranks whose maxima differ in float32's last bits: 16-bit types tie them
)
D2T_PLANS = ("spread", "prefix", "suffix")  # EAGLE3's tables: strictly increasing, as trained drafts have them
NORMS = ("uniform", "varied")  # the target's final norm weights: all 1, or powers of two per feature


@dataclass(frozen=True)
class Sizes:
    """The models every engine of a run serves (hidden 128 in 4 heads of 32: a head size CPU attention supports)."""

    # Past 2**11, so that winners reach ids bfloat16 (2**8) and float16 (2**11) cannot carry exactly
    vocab: int = 4500  # the target's: padded to 4544, 44 padding rows at tp 1 and on rank 1 at tp 2 (from 2272)
    draft_vocab: int = 2300  # EAGLE3's and the heterogeneous draft's: padded to 2304, 4 padding rows on the last rank
    hidden: int = 128
    heads: int = 4
    intermediate: int = 256
    target_layers: int = 2
    max_len: int = 256
    num_speculative_tokens: int = 3

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


SIZES = Sizes()
MAX_PROMPTS, MAX_PROMPT_LEN, MAX_TOKENS = 8, 32, 48
INT_FIELDS = {"seed": (0, 2**32 - 1), "max_tokens": (1, MAX_TOKENS)}


@dataclass(frozen=True)
class Scenario:
    """One example: the models' plan and the requests; ``exact`` makes the draft predict the target exactly."""

    seed: int
    exact: bool
    plants: tuple[str, ...]
    d2t: str
    norm: str
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int

    def __post_init__(self) -> None:
        for f in fields(self):
            what = _rule(f.name, getattr(self, f.name))
            if what:
                raise ValueError(f"Scenario field {f.name!r} must be {what}, got {_shown(getattr(self, f.name))}")
        if self.exact and self.norm != "uniform":  # EAGLE's draft has no final norm: it shares the target's head
            raise ValueError("Scenario: an exact plan has norm='uniform' (EAGLE's draft applies no norm of its own)")

    @classmethod
    def from_fields(cls, data: Any) -> Scenario:
        """A scenario from a repro file's fields (lists where the repr has tuples); anything else is a ValueError."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            names = sorted(f.name for f in fields(cls))
            raise ValueError(f"a scenario is an object with exactly the fields {names}")
        plants, prompts = data["plants"], data["prompts"]
        if (
            not isinstance(plants, list)
            or not isinstance(prompts, list)
            or not all(isinstance(p, list) for p in prompts)
        ):
            raise ValueError("a scenario's plants and prompts are lists (prompts: lists of token ids)")
        return cls(**{**data, "plants": tuple(plants), "prompts": tuple(tuple(p) for p in prompts)})

    def as_fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _rule(name: str, value: object) -> str | None:
    """What ``value`` must be to serve as the field ``name`` (None: it is fine)."""
    if name in INT_FIELDS:
        low, high = INT_FIELDS[name]
        return None if _is_int(value) and low <= value <= high else f"an int in [{low}, {high}]"
    if name == "exact":
        return None if isinstance(value, bool) else "True or False"
    if name == "plants":
        ok = isinstance(value, tuple) and all(isinstance(p, str) and p in PLANTS for p in value)
        return None if ok and len(set(value)) == len(value) else f"a tuple of distinct names from {PLANTS}"
    if name in ("d2t", "norm"):
        choices = D2T_PLANS if name == "d2t" else NORMS
        return None if isinstance(value, str) and value in choices else f"one of {choices}"
    if name == "prompts":
        ok = isinstance(value, tuple) and 1 <= len(value) <= MAX_PROMPTS
        ok = ok and all(isinstance(p, tuple) and 1 <= len(p) <= MAX_PROMPT_LEN for p in value)
        ok = ok and all(_is_int(t) and 0 <= t < SIZES.vocab for p in value for t in p)
        return None if ok else (f"1 to {MAX_PROMPTS} tuples of 1 to {MAX_PROMPT_LEN} token ids in [0, {SIZES.vocab})")
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: object, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
