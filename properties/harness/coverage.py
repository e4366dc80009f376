"""Which features of a case an example exercised, and which pairs of them met: bugs live where two meet.

Every example that builds a case reports its features as Hypothesis ``event()``s
(``--hypothesis-show-statistics`` shows them per test).  With ``TPARGMAX_COVERAGE``
set to a directory, each worker also writes every example's features there, one
JSON line per example, through Hypothesis's observability callback; ``tpargmax
coverage`` runs the properties so and counts each valid pair.  Nothing is computed
unless someone listens (``Settings.listening``), so the default run pays nothing.

A feature is ``"dimension: value"``.  Two features of one single-valued dimension
never meet (a case has one dtype); the multi-valued dimensions (tie and special
plans, winner kinds) pair within themselves too.  :data:`IMPOSSIBLE` names the
pairs that no case can hold, each with its reason.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from itertools import combinations
from pathlib import Path

import torch
from hypothesis import event
from hypothesis.control import currently_in_test_context

from properties.cases.case import D2T_PLANS, DTYPES, PADDING_PLANS, SPECIAL_PLANS, TIE_PLANS, Inputs
from properties.harness.settings import current
from reference.logits import head_logits
from reference.sampling import top_k_mask, top_p_mask
from reference.topk import order_keys

SAMPLING_KINDS = (
    "greedy",
    "temperature only",
    "top-k",
    "top-p",
    "tie at the k-th value",
    "top-k removed a finite token",
    "top-p removed a finite token",
    "kept set is one token",
    "top-p's boundary token tied",
)
COVERAGE_ENV = "TPARGMAX_COVERAGE"
EVENTS_ENV = "TPARGMAX_FEATURE_EVENTS"  # "off": no feature events even with statistics shown (tpargmax throughput)

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "added ids": ("tokens", "none"),
    "ids >= L": ("present", "none"),
    "padding size": ("64", "96", "128"),
    "d2t": D2T_PLANS,
    "winner": ("base", "added", "padding trap"),
    "tie": TIE_PLANS,
    "special": SPECIAL_PLANS,
    "padding": PADDING_PLANS,
    "dtype": tuple(DTYPES),
    "soft cap": ("on", "off"),
    "scale": ("1", "not 1"),
    "sampling": SAMPLING_KINDS,  # what a sampling example's rows do
}
MULTI = ("winner", "tie", "special", "sampling")  # an example may hold several values of these
_NO_ADDED = "added ids: none"
IMPOSSIBLE: dict[frozenset[str], str] = {
    **{
        frozenset((_NO_ADDED, f)): "an added id must be a token"
        for f in ("winner: added", "tie: added_tie", "tie: added_max")
    },
    frozenset(("special: signed_zero", "scale: 1")): "the signed-zero plan runs at scale 0.5",
    frozenset(("tie: softcap_saturation", "soft cap: off")): "the saturation plan needs a soft cap",
}


def all_features() -> list[str]:
    return [f"{dim}: {value}" for dim, values in DIMENSIONS.items() for value in values]


def valid_pairs() -> list[frozenset[str]]:
    """Every pair of features some case can hold."""
    pairs = []
    for a, b in combinations(all_features(), 2):
        same = a.split(": ")[0] == b.split(": ")[0]
        if (not same or a.split(": ")[0] in MULTI) and frozenset((a, b)) not in IMPOSSIBLE:
            pairs.append(frozenset((a, b)))
    return pairs


def features(inputs: Inputs, logits: torch.Tensor) -> list[str]:
    """The features of one built case; ``logits`` are the oracle's draft logits (for the winner kinds)."""
    case, vocab = inputs.case, inputs.vocab
    found = [
        f"added ids: {'tokens' if vocab > case.vocab else 'none'}",
        f"ids >= L: {'present' if vocab < case.vocab + case.added else 'none'}",
        f"padding size: {case.padding_size}",
        f"d2t: {case.d2t}",
        f"dtype: {case.dtype}",
        f"soft cap: {'off' if case.soft_cap is None else 'on'}",
        f"scale: {'1' if case.scale == 1.0 else 'not 1'}",
    ]
    found += [f"tie: {p}" for p in inputs.applied if p in TIE_PLANS]
    found += [f"special: {p}" for p in inputs.applied if p in SPECIAL_PLANS]
    found += [f"padding: {p.removeprefix('padding_')}" for p in inputs.applied if p.startswith("padding_")]
    return found + winners(inputs, logits)


def winners(inputs: Inputs, logits: torch.Tensor) -> list[str]:
    """The kinds of id that win the rows: a base id, an added id, and a padding trap that would win if it
    were not masked (padding rows and ids >= L all hold the trap row)."""
    values = logits.float()
    nan = values.isnan()
    best = torch.where(nan.any(-1), nan.int().argmax(-1), values.argmax(-1))
    kinds = {"base" if int(b) < inputs.case.vocab else "added" for b in best}
    has_trap = any(lay.num_padding for lay in inputs.layouts) or inputs.vocab < inputs.case.vocab + inputs.case.added
    if has_trap and inputs.pad_weight is not None:
        pad_bias = None if inputs.pad_bias is None else inputs.pad_bias.reshape(1)
        trap = head_logits(inputs.hidden, inputs.pad_weight[None], pad_bias, inputs.case.scale, inputs.case.soft_cap)
        trap, top = trap[:, 0].float(), values.max(-1).values
        if bool((trap.isnan() | (~nan.any(-1) & (trap >= top))).any()):
            kinds.add("padding trap")
    return [f"winner: {k}" for k in sorted(kinds)]


def observe(inputs: Inputs, logits_of) -> None:
    """Report the example's features as events, if anyone listens; ``logits_of()`` gives the oracle logits.

    No ``target()``: steering toward near-ties put two thirds of the ci profile's examples into one cluster
    of plans, cut the cross-rank ties to 1 in 80 and the tied rows by half, and ran 2.4 times as long.
    """
    if not (current().listening and currently_in_test_context()):
        return
    logits = logits_of()
    for feature in features(inputs, logits):
        event(feature)
    values = logits.float()
    best = values.max(dim=-1).values
    if bool(best.isnan().any()):
        event("a row's maximum is NaN")
    if bool(((values == best.unsqueeze(-1)).sum(-1) >= 2).any()):
        event("a row's maximum is tied")


def sampling_features(params, vocab: int, x: torch.Tensor) -> list[str]:
    """The kinds of sampled row in a batch; ``x`` are the classic sampler's ``logits / T`` by target id, ``vocab``
    the logits vocabulary (a top-k of at least it keeps every token)."""
    greedy, k, p = params.greedy.cpu(), params.top_k.cpu(), params.top_p.cpu()
    x = x.cpu()
    sampled = ~greedy
    k_on = (k > 0) & (k < vocab) & sampled
    found = {"greedy"} if bool(greedy.any()) else set()
    if bool((sampled & ~k_on & (p >= 1)).any()):
        found.add("temperature only")
    if bool(k_on.any()):
        found.add("top-k")
        ranked = order_keys(x[k_on]).sort(dim=1, descending=True).values
        at = k[k_on].unsqueeze(1)
        beyond = ranked.gather(1, at.clamp(max=x.shape[1] - 1))
        if bool((ranked.gather(1, at - 1) == beyond).any()):
            found.add("tie at the k-th value")
    if bool(((p < 1) & sampled).any()):
        found.add("top-p")
    finite = torch.isfinite(x)
    by_k = top_k_mask(x, k)
    kept = top_p_mask(x, by_k, p)  # top-k's set, then top-p over it: the classic kept set
    if bool((sampled & (finite & ~by_k).any(dim=1)).any()):
        found.add("top-k removed a finite token")
    cut = sampled & (finite & by_k & ~kept).any(dim=1)
    if bool(cut.any()):
        found.add("top-p removed a finite token")
        last = x.masked_fill(~kept, math.inf).amin(dim=1, keepdim=True)  # the smallest kept x: top-p's boundary
        if bool((cut & ((x == last) & kept).sum(dim=1).ge(2)).any()):
            found.add("top-p's boundary token tied")
    if bool((sampled & ((kept & (x != -math.inf)).sum(dim=1) == 1)).any()):  # one token can be drawn
        found.add("kept set is one token")
    return [f"sampling: {kind}" for kind in sorted(found)]


def observe_sampling(params, vocab: int, x_of) -> None:
    """Report a sampling example's row kinds as events, if anyone listens; ``x_of()`` gives the scaled logits."""
    if current().listening and currently_in_test_context():
        for feature in sampling_features(params, vocab, x_of()):
            event(feature)


def record_to(directory: str) -> None:
    """Write each example's features, one JSON line per example, to a file of this process in ``directory``."""
    from hypothesis.internal import observability

    path = Path(directory) / f"{os.getpid()}.jsonl"
    known = set(all_features())

    def write(observation) -> None:
        if observation.type != "test_case" or observation.status == "gave_up":
            return
        mine = sorted(f for f in observation.features if f in known)
        if mine:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"test": observation.property, "features": mine}) + "\n")

    # Hypothesis traces every line of every example for an observer unless told not to (it documents this switch
    # for monkeypatching): on Python 3.11 that is sys.settrace, and it slowed each example severalfold.
    observability.OBSERVABILITY_COLLECT_COVERAGE = False
    observability.add_observability_callback(write)  # the thread that runs the tests


def read(directory: str) -> list[list[str]]:
    """Every recorded example's features."""
    return [json.loads(line)["features"] for p in Path(directory).glob("*.jsonl") for line in p.open()]


def count_pairs(examples: Iterable[Iterable[str]]) -> tuple[Counter[str], Counter[frozenset[str]]]:
    """How many examples held each feature, and each pair of features."""
    singles: Counter[str] = Counter()
    pairs: Counter[frozenset[str]] = Counter()
    for found in examples:
        found = sorted(set(found))
        singles.update(found)
        pairs.update(frozenset(p) for p in combinations(found, 2))
    return singles, pairs
