"""Which vLLM cause gets which standalone script: one :class:`Script` per cause (its file, its template kind, the
case it is generated from), for ``tpargmax.report.scripts`` to fill ``engines.vllm.causes.scripts``'s templates with.

Pure data: importing this needs neither vLLM nor the project's ``properties``, ``groups`` or ``tpargmax``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engines.versions import VLLM_VERSION


@dataclass(frozen=True)
class Script:
    """One cause's script: its file, its kind, and where its case comes from."""

    cause: str  # the id of a cause in engines.vllm.causes.findings.FINDINGS
    stem: str  # the file name, without ``.py``, under its release's page folder
    kind: str  # a key of engines.vllm.causes.scripts.KINDS
    repro: str = ""  # the key of a committed repro file of its release (engines.versions.vllm_repro)
    case: dict[str, Any] = field(default_factory=dict)  # a Case's fields, where the failure has no repro file
    k: int | None = None  # top-k's k where the source records none
    tp: int | None = None  # the ranks, where fewer than the case's show the same answer
    rows: tuple[int, ...] | None = None  # the hidden rows kept (rows are independent); None: all
    keep: tuple[int, ...] | None = None  # the head rows kept, the others zero (a large head); None: all
    constants: str = ""  # lines the kind needs besides the case (Gemma4's centroids)
    data: str = ""  # the case's tensors, written out here where no file holds them (V4)
    note: str = ""  # what the case shows, one sentence for the docstring
    release: str = VLLM_VERSION  # the release whose page the cause is on (its folder, its repro files)


# Causes whose reproduction is written by hand, beside its page, and left alone by the generator: a defect in a
# proposer's routing (engines.vllm.causes.proposers), which no head's case and template shows.
HAND_WRITTEN = ("V17", "V18", "V19")

# The first release's causes' scripts; a later release's are data in its own file (engines/vllm/releases/X.toml,
# [[vllm.scripts]]: these fields but ``release``, which is the file's).


# V4: the smallest head past 2**24 ids is hidden size 1 (2**24 + 2 float32 rows: 64 MiB, 32 MiB a rank).
_FLOAT_IDS = (
    "WINNER = 2**24 + 1  # odd: float32 cannot hold it, and 2**24 + 2 ids are the fewest that include it\n"
    "H = torch.ones(1, 1)  # hidden states [batch, hidden]: hidden size 1 keeps the head at 64 MiB\n"
    "W = torch.zeros(WINNER + 1, 1)  # the head's rows by id: every logit 0 but the winner's, 1\n"
    "W[WINNER] = 1.0\n"
    "B = None  # the head's bias by id\n"
)

# EARLIER: V1, V2, V3 and V8's cases are failures of the 0.32.0 page's first run, when gloo drew a quarter of the
# examples; the run at a sixteenth did not draw them. Built from their seeds as the property builds them, they
# are the tensors that run recorded; the scripts show the causes, the page's own failures the rest.
SCRIPTS: tuple[Script, ...] = (
    Script(
        "V1",
        "V1-added-ids",
        "top_k_log_probs",
        case={"batch": 4, "hidden": 3, "vocab": 1, "tp": 2, "added": 1},  # vllm_topk_logprobs, top-1 (EARLIER)
        k=2,
        note="Added id 1 sits at row 32 of rank 0 (after its 32 padded base rows), and vLLM returns 32 for it. "
        "(Row 2's 24 and 22 are base padding rows: the mask covers the shard's last 31 rows, its added padding.)",
    ),
    Script(
        "V2",
        "V2-classic-shard-order",
        "classic",
        "test_token_exact-vllm_classic-gloo-21ccbf4391",
        rows=(0,),
        keep=(582, 1015),
        note="Base id 582 and added id 1015 tie. The gathered columns run rank 0's 512 base rows, its 32 added rows "
        "(id 1015 at column 517), then rank 1's base rows (id 582 at column 614): vLLM's classic path takes "
        "column 517, the first of the tie, and returns 517 as if it were an id, where the lowest id is 582.",
    ),
    Script(
        "V3",
        "V3-logits-vocab",
        "argmax",
        # vllm, tp invariance (EARLIER)
        case={"batch": 1, "hidden": 3, "vocab": 2, "tp": 2, "logits_vocab": 1, "padding": "above_max", "d2t": "zeros"},
        note="Id 1 is a row of the head but not a token (logits vocabulary 1), and its logit is the larger: the "
        "classic path keeps only id 0; vLLM's max over the unmasked shard takes id 1 (in that run, `d2t[1]` then "
        "raised).",
    ),
    Script(
        "V4",
        "V4-float-ids",
        "argmax",
        case={"batch": 1, "hidden": 1, "vocab": 2**24 + 2, "tp": 2},
        data=_FLOAT_IDS,
        note="No repro file: test_ids_beyond_float32_are_exact_or_rejected builds its own head (2**24 + 3 ids, hidden "
        "size 1). This is the smallest that shows it: 2**24 + 2 ids, 64 MiB in float32. Id 2**24 + 1 travels between "
        "ranks as a float32 and comes back as 2**24.",
    ),
    Script(
        "V5",
        "V5-top-k-tie-order",
        "top_k",
        "test_top_k_exact-vllm_topk-gloo-9f8e8a4653",
        note="Ids tie in rows 1 (0 and 1) and 2 (0, 1 and 2); torch.topk returns them in an order it does not "
        "document (at tp=2 it happens to return them in ascending id: the script keeps the case's tp=4).",
    ),
    Script(
        "V6",
        "V6-top-k-neg-inf-padding",
        "top_k",
        "test_top_k_exact-vllm_topk-gloo-155c488c0b",
        rows=(0,),
        note="Every logit of the row is -inf (its hidden feature 1 is +inf), as the padding mask is: padding ids, "
        "past the 90 base ids, come back.",
    ),
    Script(
        "V7",
        "V7-top-k-scale-before-cap",
        "top_k_values",
        "test_top_k_exact-engines_vllm_models_DFlash2Qwen3ForCausalLM_get_top_k_tokens-gloo-d6f09d5982",
        keep=(837, 847, 900),
        note="DFlash2's candidate head: scale 0.5, soft cap 30; the top values are scaled, then capped.",
    ),
    Script(
        "V8",
        "V8-top-k-select-before-cap",
        "top_k",
        case={  # DFlash2Qwen3ForCausalLM.get_top_k_tokens, top-1 (EARLIER)
            "batch": 1,
            "hidden": 64,
            "vocab": 1000,
            "tp": 2,
            "seed": 185,
            "scale": 0.5,
            "soft_cap": 30.0,
            "ties": ("softcap_saturation",),
        },
        k=1,
        keep=(411, 487, 497),
        note="Ids 411, 487 and 497 (raw logits 515, 643, 579) all cap to 30.0 in float32: the classic path takes "
        "the lowest id, vLLM's top-k the largest raw logit.",
    ),
    Script(
        "V9",
        "V9-top-k-k-above-vocab",
        "top_k_above",
        case={"batch": 2, "hidden": 4, "vocab": 5, "tp": 2, "added": 3, "logits_vocab": 6},
        k=7,
        note="No repro file: the property's own case. k=7 above 6 token ids is accepted.",
    ),
    Script(
        "V10",
        "V10-shm-int64-all-gather",
        "top_k_shared_memory",
        "test_top_k_exact-vllm_topk-gloo-d70b8e096a",
        note="Every rank takes the same VLLM_DIST_IDENT, as vLLM's CPU worker does: the shared-memory communicator.",
    ),
    Script(
        "V11",
        "V11-gemma4-masked-ties",
        "gemma4",
        "test_token_exact-engines_vllm_models_Gemma4MTP_all_centroids__get_top_tokens-gloo-fbfdea188a",
        tp=2,
        rows=(1,),
        keep=(241, 450, 619),
        constants="CENTROIDS = 8  # Gemma4MTPMaskedEmbedder: 8 centroids of 125 tokens, seeded as the suite seeds them",
        note="Ids 241, 450 and 619 tie at 528 (30.0 capped); the masked argmax takes the first candidate, in the "
        "order of the centroids' scores.",
    ),
    Script(
        "V12",
        "V12-gemma4-dense-assert",
        "gemma4",
        "test_token_exact-engines_vllm_models_Gemma4MTP_dense__get_top_tokens-gloo-938efa64ff",
        keep=(900,),
        constants="CENTROIDS = 0  # no use_ordered_embeddings: a dense head, no masked embedder",
        note="A Gemma4MTP without use_ordered_embeddings has no masked embedder.",
    ),
    Script(
        "V13",
        "V13-gemma4-masked-soft-cap",
        "gemma4_logits",
        "test_token_exact-engines_vllm_models_Gemma4MTP_all_centroids__compute_logits-gloo-8875532f20",
        tp=2,
        rows=(1,),
        keep=(46, 79, 202, 245),
        constants="CENTROIDS = 8  # Gemma4MTPMaskedEmbedder: 8 centroids of 125 tokens, seeded as the suite seeds them",
        note="Ids 46, 79, 202 and 245 (raw logits 504, 696, 568, 632) all cap to 30.0 in float32: the classic path "
        "takes the lowest id; the masked head scatters the raw logits, uncapped, and argmax takes the largest.",
    ),
)
