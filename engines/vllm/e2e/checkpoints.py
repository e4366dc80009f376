"""Tiny Hugging Face checkpoints (``config.json`` and ``model.safetensors``) whose verdicts are exact by construction.

An engine's numbers must not decide a verdict: greedy tokens that flip on a last-bit difference between tp 1 and
tp 2, or between a batch of one and a batch of four, would fail the equalities the properties assert.  So every
computed value is independent of summation order and batch shape:

- Every embedding is feature 0 = ``C0`` beside a signed permutation of one vector of values ``m * 2**k``
  (``m`` in 1, 1.25, 1.5, 1.75): every token has the same RMS, and two values either differ by 12.5 % or more or
  are equal up to a power of two, which rounding keeps exact.
- The targets' decoder layers are zero (their attention and MLP add exactly 0): the next token depends only on the
  current one, and the final hidden state is the normalised embedding, whatever the batch.
- Every head row has one nonzero weight, a power of two (or a planted NaN or infinity, or, for
  ``near_ties_across_ranks``, one float32 ulp above a power of two): each logit is one product, rounded once, the
  same in oneDNN, ``F.linear`` and any shard.
- EAGLE's draft copies the embedding through ``fc``; EAGLE3's attends only to its own position (rotary keys and
  queries on feature 0, scores at least ``0.686 * SCORE_PER_PAIR`` apart) and copies it through ``v`` and ``o``,
  its hidden norm's zero weights keeping every earlier hidden state out (``norm_before_residual``);
  the plain draft is a copy of the target's body.  With ``exact``, the draft's head holds the target's rows (through
  ``d2t`` for EAGLE3) and predicts the target's next token exactly.

The bodies are written once, when an engine starts (:func:`write_models`); an example changes only the tensors of
:func:`plan_tensors` (embeddings, heads, norms, ``d2t``), which the engine's workers reload in place.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import torch

from engines.safetensors_file import save
from engines.vllm.e2e import vocabularies
from engines.vllm.e2e.scenario import D2T_PLANS, HETERO, SIZES, Scenario

C0 = 1.0  # feature 0 of every embedding: the constant EAGLE3's queries and keys are made of
MANTISSAS = torch.tensor([1.0, 1.25, 1.5, 1.75])
EXPONENTS = torch.tensor([-2, -1, 0, 1])
SCALE_EXPONENTS = torch.tensor([-2, -1, 0, 1, 2])  # a head row's weight: +-2**e
FAR_WEIGHT = 16.0  # winners_across_ids: four times the strongest other row
# near_ties_across_ranks: two pairs, each's later row one float32 ulp above the other (16-bit types tie them): one on
# a drawn feature, twice the strongest drawn row; one on feature 0 (every token's C0), above every other row whatever
# the norm, so that every token reaches it
NEAR_WEIGHT, NEAR_EVERY = 8.0, 256.0
UNMAPPED = -32.0  # EAGLE3: target rows no draft id maps to read feature 0 with this, so they never win
EAGLE3_LOGIT_SCALE = 0.75  # EAGLE3's config sets logit_scale: its LogitsProcessor scales the draft's logits
ROPE_THETA = 10000.0
SCORE_PER_PAIR = 1000.0  # EAGLE3's attention score per rotary pair at distance 0 (16 pairs per head)
START = Scenario(seed=0, exact=False, plants=(), d2t="spread", norm="uniform", prompts=((0,),), max_tokens=1)


def boundary(rows: int) -> int:
    """The first id of rank 1 at tp 2: vLLM pads a head to a multiple of 64 rows and splits it evenly."""
    return -(-rows // 64) * 64 // 2


def _gen(seed: int, stream: int) -> torch.Generator:
    """One generator per purpose, so a method's draft never shifts the target's draws."""
    return torch.Generator().manual_seed(seed * 8 + stream)


def _values(g: torch.Generator, n: int) -> torch.Tensor:
    m = MANTISSAS[torch.randint(len(MANTISSAS), (n,), generator=g)]
    return m * torch.exp2(EXPONENTS[torch.randint(len(EXPONENTS), (n,), generator=g)].float())


def embeddings(scenario: Scenario) -> torch.Tensor:
    """``[vocab, hidden]``: feature 0 is ``C0``; the rest a signed permutation of one vector, per token."""
    return _embeddings(scenario.seed).clone()  # a copy: the caller may change it


@functools.lru_cache(maxsize=8)
def _embeddings(seed: int) -> torch.Tensor:  # the seed's alone, the same for every method and plan: drawn once
    g, size = _gen(seed, 0), SIZES.hidden - 1
    base = _values(g, size)
    perms = torch.argsort(torch.rand(SIZES.vocab, size, generator=g), dim=1)
    signs = torch.randint(0, 2, (SIZES.vocab, size), generator=g).float() * 2 - 1
    return torch.cat([torch.full((SIZES.vocab, 1), C0), base[perms] * signs], dim=1)


def sparse_rows(g: torch.Generator, rows: int) -> torch.Tensor:
    """Head rows with one weight each, ``+-2**e`` on a feature other than 0."""
    w = torch.zeros(rows, SIZES.hidden)
    features = torch.randint(1, SIZES.hidden, (rows,), generator=g)
    scale = torch.exp2(SCALE_EXPONENTS[torch.randint(len(SCALE_EXPONENTS), (rows,), generator=g)].float())
    sign = torch.randint(0, 2, (rows,), generator=g).float() * 2 - 1
    w[torch.arange(rows), features] = scale * sign
    return w


def far_ids(rows: int) -> list[int]:
    """Where ``winners_across_ids`` plants its rows: the first and last id of each rank at tp 2 (the last the last
    base id) and the first ids bfloat16 and float16 cannot carry (2**8 + 1, 2**11 + 1), in a head of ``rows``."""
    b = boundary(rows)
    return sorted({0, b - 1, b, rows - 1} | {i for i in (2**8 + 1, 2**11 + 1) if i < rows})


def planted(w: torch.Tensor, plants: tuple[str, ...], g: torch.Generator) -> torch.Tensor:
    """``w`` with the plan's cases planted, in the order of ``PLANTS`` (``all_negative`` first: it clears the rest);
    all but ``winners_across_ids`` around the tp=2 shard boundary."""
    w, b = w.clone(), boundary(len(w))
    strong = torch.zeros(4, SIZES.hidden)  # weight +4 on a feature: these rows often win
    strong[torch.arange(4), torch.randint(1, SIZES.hidden, (4,), generator=g)] = 4.0
    if "all_negative" in plants:
        w.zero_()
        w[:, 0] = -torch.exp2(SCALE_EXPONENTS[torch.randint(len(SCALE_EXPONENTS), (len(w),), generator=g)].float())
    if "zero_rows" in plants:
        w[[3, b - 4, b + 4]] = 0.0
    if "winners_across_ids" in plants:  # +16 on a feature each, distinct: a token high on one picks its row
        ids = far_ids(len(w))
        features = 1 + torch.randperm(SIZES.hidden - 1, generator=g)[: len(ids)]
        w[ids] = 0.0
        w[ids, features] = FAR_WEIGHT
    if "near_ties_across_ranks" in plants:  # the later id larger by float32's last bit: 16-bit types tie them
        pairs = [(b - 1, b), (1, len(w) - 1)]  # at the shard boundary, and at both ends of the id range
        if bool(torch.randint(0, 2, (1,), generator=g)):  # which pair every token reaches
            pairs.reverse()
        other = 1 + int(torch.randint(0, SIZES.hidden - 1, (1,), generator=g))
        for (low, high), (feature, weight) in zip(pairs, ((0, NEAR_EVERY), (other, NEAR_WEIGHT)), strict=True):
            w[[low, high]] = 0.0
            w[low, feature], w[high, feature] = weight, weight * (1 + 2**-23)
    if "ties_across_ranks" in plants:
        for i in range(4):
            w[b - 1 - i] = w[b + i] = strong[i]
    if "ties_in_shard" in plants:
        w[6] = w[5] = strong[0]
        w[b + 6] = w[b + 5] = strong[1]
    feature = int(torch.randint(1, SIZES.hidden, (1,), generator=g))
    if "nan_rows" in plants:
        w[b + 3, feature] = float("nan")
        if bool(torch.randint(0, 2, (1,), generator=g)):  # a first NaN on rank 0, or only rank 1's
            w[b - 3, feature] = float("nan")
    if "inf_rows" in plants:
        w[[b - 2, b + 2], feature] = float("inf")
    return w


def chained(embed: torch.Tensor, head: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
    """``embed`` with the tokens of ``winners_across_ids``'s rows (their targets through ``targets``, for EAGLE3)
    rearranged so that each picks the next such row: a draft that predicts one walks them all, position after
    position.  Each token stays a signed permutation of the same values: its largest moves, positive, to the next
    row's feature, and the other rows' features turn negative."""
    ids = [i for i in far_ids(len(head)) if int(head[i].ne(0).sum()) == 1 and float(head[i].max()) == FAR_WEIGHT]
    features = [int(head[i].argmax()) for i in ids]
    embed = embed.clone()
    for k, i in enumerate(ids):
        token, want = int(targets[i]) if targets is not None else i, features[(k + 1) % len(ids)]
        row = embed[token]
        top = 1 + int(row[1:].abs().argmax())
        row[[top, want]] = row[[want, top]]
        row[want] = row[want].abs()
        others = [f for f in features if f != want]
        row[others] = -row[others].abs()
    return embed


def d2t_targets(scenario: Scenario) -> torch.Tensor:
    """EAGLE3's target ids by draft id, strictly increasing."""
    v, dv = SIZES.vocab, SIZES.draft_vocab
    if scenario.d2t == "prefix":
        return torch.arange(dv)
    if scenario.d2t == "suffix":
        return torch.arange(v - dv, v)
    assert scenario.d2t == "spread", D2T_PLANS
    return torch.randperm(v, generator=_gen(scenario.seed, 3))[:dv].sort().values


@functools.cache
def own_words() -> tuple[torch.Tensor, torch.Tensor]:
    """The heterogeneous draft's words in the target's ids: ``(ids, shared)``, ``ids[d]`` the target id of draft id
    ``d``'s word where the target has it (``shared[d]``), else ``d`` (whose target embedding its word reads)."""
    targets = vocabularies.draft_to_target()
    return torch.where(targets >= 0, targets, torch.arange(len(targets))), targets >= 0


def norm_weight(scenario: Scenario) -> torch.Tensor:
    if scenario.norm == "uniform":
        return torch.ones(SIZES.hidden)
    return torch.exp2(torch.randint(-1, 2, (SIZES.hidden,), generator=_gen(scenario.seed, 4)).float())


def plan_tensors(scenario: Scenario, method: str | None) -> dict[str, dict[str, torch.Tensor]]:
    """What an example changes, in checkpoint names: ``{"target": {...}, "draft": {...}}`` (float32; ``d2t`` int64).

    ``method`` None is the target alone (an engine without speculation), as the same plan's target for ``method``
    would be for every method but EAGLE3, whose target keeps its unmapped rows out of reach."""
    g_head, g_draft = _gen(scenario.seed, 1), _gen(scenario.seed, 2)
    norm, embed = norm_weight(scenario), embeddings(scenario)
    target_head = sparse_rows(g_head, SIZES.vocab)
    draft: dict[str, torch.Tensor] = {}
    if method == "eagle3":
        targets = d2t_targets(scenario)
        head = planted(sparse_rows(g_draft, SIZES.draft_vocab), scenario.plants, g_draft)
        mapped = target_head[targets] if not scenario.exact else head
        target_head = torch.zeros_like(target_head)
        target_head[:, 0] = UNMAPPED
        target_head[targets] = mapped
        draft = {"lm_head.weight": head, "d2t": targets - torch.arange(SIZES.draft_vocab), "norm.weight": norm}
    elif method == "eagle" or (method == "draft_model" and scenario.exact):
        target_head = planted(target_head, scenario.plants, g_draft)
    if method == "draft_model":
        head = target_head if scenario.exact else planted(sparse_rows(g_draft, SIZES.vocab), scenario.plants, g_draft)
        draft = {"model.norm.weight": norm, "lm_head.weight": head}
    own, shared = own_words() if method == HETERO else (None, None)  # each draft id's target word, or its own id
    if own is not None:
        head = planted(sparse_rows(g_draft, SIZES.draft_vocab), scenario.plants, g_draft)
        if scenario.exact:  # the target's rows are the shared draft rows; every other target row never wins
            target_head = torch.zeros_like(target_head)
            target_head[:, 0] = UNMAPPED
            target_head[own[shared]] = head[shared]
        draft = {"model.norm.weight": norm, "lm_head.weight": head}
    if "winners_across_ids" in scenario.plants and method is not None:
        planted_head = draft.get("lm_head.weight", target_head)  # EAGLE shares the target's
        targets = d2t_targets(scenario) if method == "eagle3" else own
        embed = chained(embed, planted_head, targets)
    if method == "draft_model":
        draft["model.embed_tokens.weight"] = embed
    if own is not None:  # a shared word reads the target's embedding of it; a word of its own, that of its id
        draft["model.embed_tokens.weight"] = embed[own]
    target = {"model.embed_tokens.weight": embed, "model.norm.weight": norm, "lm_head.weight": target_head}
    return {"target": target, "draft": draft}


def _llama(architecture: str, layers: int, **extra: object) -> dict[str, object]:
    s = SIZES
    return {
        "architectures": [architecture],
        "model_type": "llama",
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.heads,
        "head_dim": s.head_dim,
        "vocab_size": s.vocab,
        "max_position_embeddings": s.max_len,
        "rms_norm_eps": 1e-6,
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    } | extra


def _zero_layer(prefix: str, qkv_in: int = SIZES.hidden) -> dict[str, torch.Tensor]:
    h, i = SIZES.hidden, SIZES.intermediate
    z = torch.zeros
    layer = {f"{prefix}.self_attn.{p}_proj.weight": z(h, qkv_in) for p in "qkv"}
    layer |= {f"{prefix}.self_attn.o_proj.weight": z(h, h), f"{prefix}.mlp.down_proj.weight": z(h, i)}
    layer |= {f"{prefix}.mlp.gate_proj.weight": z(i, h), f"{prefix}.mlp.up_proj.weight": z(i, h)}
    return layer | {f"{prefix}.{n}.weight": torch.ones(h) for n in ("input_layernorm", "post_attention_layernorm")}


def own_position_attention(prefix: str) -> dict[str, torch.Tensor]:
    """EAGLE3's layer: queries and keys are feature 0 on the first half of every head's rotary pairs, so a position
    scores highest against itself; values and output copy the normalised embedding (the first half of the input)."""
    h, d = SIZES.hidden, SIZES.head_dim
    layer = _zero_layer(prefix, qkv_in=2 * h)
    mean_square = float((MANTISSAS**2).mean() * torch.exp2(2 * EXPONENTS.float()).mean())  # of the other features
    c = C0 / math.sqrt((C0**2 + (h - 1) * mean_square) / h)  # feature 0 after the input norm, about 0.6
    weight = math.sqrt(SCORE_PER_PAIR * math.sqrt(d)) / c
    pairs = torch.cat([torch.arange(d // 2) + head * d for head in range(SIZES.heads)])
    for p in "qk":
        layer[f"{prefix}.self_attn.{p}_proj.weight"][pairs, 0] = weight
    layer[f"{prefix}.self_attn.v_proj.weight"][:, :h] = torch.eye(h)
    layer[f"{prefix}.self_attn.o_proj.weight"] = torch.eye(h)
    # with norm_before_residual, the residual is the hidden norm's output: zero weights keep the target's hidden
    # state (step 0) and the draft's own (later steps) out of it, so every step sees only its own token
    return layer | {f"{prefix}.hidden_norm.weight": torch.zeros(h)}


def bodies(method: str | None) -> dict[str, dict[str, torch.Tensor]]:
    """The weights an example never changes, in checkpoint names."""
    h = SIZES.hidden
    target = {k: v for i in range(SIZES.target_layers) for k, v in _zero_layer(f"model.layers.{i}").items()}
    draft: dict[str, torch.Tensor] = {}
    if method == "eagle3":
        draft = own_position_attention("midlayer") | {"fc.weight": torch.zeros(h, 3 * h)}
    elif method == "eagle":
        layer = _zero_layer("layers.0")
        del layer["layers.0.input_layernorm.weight"]  # EAGLE's first layer has none (an Identity)
        draft = layer | {"fc.weight": torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1)}
    elif method in ("draft_model", HETERO):
        draft = _zero_layer("model.layers.0")
    return {"target": target, "draft": draft}


def configs(method: str | None) -> dict[str, dict[str, object]]:
    target = _llama("LlamaForCausalLM", SIZES.target_layers)
    if method == "eagle3":
        aux = {"eagle_aux_hidden_state_layer_ids": list(range(SIZES.target_layers + 1))}
        draft = _llama(
            "LlamaForCausalLMEagle3",
            1,
            draft_vocab_size=SIZES.draft_vocab,
            eagle_config=aux,
            norm_before_residual=True,
            logit_scale=EAGLE3_LOGIT_SCALE,
        )
        return {"target": target, "draft": draft}
    if method == HETERO:
        return {"target": target, "draft": _llama("LlamaForCausalLM", 1, vocab_size=SIZES.draft_vocab)}
    return {"target": target} | ({"draft": _llama("LlamaForCausalLM", 1)} if method else {})


def write_models(directory: Path, method: str | None) -> dict[str, Path]:
    """``directory/target`` (and ``directory/draft``): configs and whole checkpoints, the plan of :data:`START`."""
    made, plan, body = {}, plan_tensors(START, method), bodies(method)
    for role, config in configs(method).items():
        folder = directory / role
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=1))
        save(body[role] | plan[role], folder / "model.safetensors")
        if method == HETERO:  # vLLM reads both tokenizers, once, to map one vocabulary to the other
            vocabularies.write_tokenizer(folder, role)
        made[role] = folder
    return made


def write_plan(directory: Path, scenario: Scenario, method: str | None) -> dict[str, Path]:
    """The tensors ``scenario`` changes, one file per model: what the engine's workers reload."""
    directory.mkdir(parents=True, exist_ok=True)
    made = {}
    for role, tensors in plan_tensors(scenario, method).items():
        if tensors:
            made[role] = directory / f"{role}.safetensors"
            save(tensors, made[role])
    return made
