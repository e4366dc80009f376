"""The probe inside every vLLM worker (``worker_extension_cls``): what the engine handed the draft's head, and what
came back, at every call; the weights of the next example; a broken local path, for the project's own tests.

vLLM mixes :class:`Probe` into its worker class and the host calls its methods by name through ``collective_rpc``
(strings and paths only: no code travels).  It runs in vLLM's processes, so it imports vLLM, lazily.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import torch

from engines.safetensors_file import save

PLANTS_MODULE = "tests.broken_engine"  # the broken local paths the project's tests plant, by name


class Probe:
    """Methods vLLM adds to its worker; state lives in attributes prefixed ``_tpargmax``."""

    def tpargmax_install(self) -> dict[str, Any]:
        """Wrap the drafter's greedy sampling and proposal, and its head's local path, to record every call;
        describe the draft's head."""
        runner = self.model_runner
        drafter = getattr(runner, "drafter", None)
        self._tpargmax_steps: list[dict[str, Any]] = []
        self._tpargmax_verified: list[dict[str, list[int]]] = []
        self._tpargmax_undo: list[tuple[object, str, object]] = []
        self._tpargmax_records = ""  # where a proposal that raises writes what was recorded, at once
        if drafter is None:
            return {"rank": self.rank, "drafter": None}
        propose, execute = drafter.propose, runner.execute_model
        model = drafter.model
        processor = model.logits_processor
        target_vocab = runner.model_config.get_vocab_size()

        def recorded_execute(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            spec = scheduler_output.scheduled_spec_decode_tokens
            if spec:  # what the target verifies this step, by request (-1: a placeholder no proposal filled)
                self._tpargmax_verified.append({r: list(t) for r, t in spec.items()})
            try:
                return execute(scheduler_output, *args, **kwargs)
            except BaseException:  # the engine dies of it: what the heads returned goes to disk first
                self._tpargmax_keep()
                raise

        def keeper(owner: Any, key: str) -> Any:
            """``owner``'s ``get_top_tokens`` (looked up on its class at each call, so a plant takes effect), its
            ids kept under ``key`` in the call being recorded."""

            def recorded(*args: Any, **kwargs: Any) -> torch.Tensor:
                ids = type(owner).get_top_tokens(owner, *args, **kwargs)
                if self._tpargmax_steps and self._tpargmax_steps[-1]["calls"]:
                    self._tpargmax_steps[-1]["calls"][-1][key] = ids.detach().clone()
                return ids

            return recorded

        def recorded_greedy(hidden_states: torch.Tensor) -> torch.Tensor:
            call: dict[str, torch.Tensor] = {"hidden": hidden_states.detach().clone()}
            if self._tpargmax_steps:
                self._tpargmax_steps[-1]["calls"].append(call)
            tokens = type(drafter)._greedy_sample(drafter, hidden_states)  # on the class: a plant takes effect
            call["tokens"] = tokens.detach().clone()
            return tokens

        def recorded_propose(*args: Any, **kwargs: Any) -> torch.Tensor:
            step: dict[str, Any] = {"calls": []}
            self._tpargmax_steps.append(step)
            try:
                drafts = propose(*args, **kwargs)
            except BaseException as exc:  # the engine dies of it: what the heads returned goes to disk first
                rows = len(step["calls"][0]["hidden"]) if step["calls"] else 0
                step["req_ids"], step["died"] = list(runner.input_batch.req_ids[:rows]), f"{type(exc).__name__}: {exc}"
                self._tpargmax_keep()
                raise
            step["drafts"] = drafts.detach().clone()
            step["req_ids"] = list(runner.input_batch.req_ids[: drafts.shape[0]])
            if bool(((drafts < 0) | (drafts >= target_vocab)).any()):  # no target holds it: vLLM may die of it
                self._tpargmax_keep()  # anywhere, even outside a worker, so the records go to disk now
            return drafts

        drafter._greedy_sample, drafter.propose, runner.execute_model = (
            recorded_greedy,
            recorded_propose,
            recorded_execute,
        )
        processor.get_top_tokens = keeper(processor, "head")  # the head's ids, before d2t
        if hasattr(model, "get_top_tokens"):  # the model's own local path, after d2t: what the proposer got
            model.get_top_tokens = keeper(model, "model")
        return {"rank": self.rank, **self._tpargmax_head_info()}

    def _tpargmax_keep(self) -> None:
        """Write what was recorded so far, keeping it (a later take writes it again, with what followed)."""
        if self._tpargmax_records:
            self.tpargmax_take(self._tpargmax_records, forget=False)

    def _tpargmax_head_info(self) -> dict[str, Any]:
        drafter = self.model_runner.drafter
        model = drafter.model
        head, processor = model.lm_head, model.logits_processor
        s = head.shard_indices
        return {
            "drafter": type(drafter).__name__,
            "model": type(model).__name__,
            "switch": bool(drafter.use_local_argmax_reduction),
            "tp": head.tp_size,
            "org_vocab": head.org_vocab_size,
            "rows_per_rank": int(head.weight.shape[0]),
            "start": s.org_vocab_start_index,
            "padding": s.num_org_vocab_padding,
            "logits_vocab": processor.org_vocab_size,
            "scale": float(processor.scale),
            "soft_cap": None if processor.soft_cap is None else float(processor.soft_cap),
            "target_vocab": self.model_runner.model_config.get_vocab_size(),
            "dtype": str(head.weight.dtype).removeprefix("torch."),
        }

    def tpargmax_load(self, target: str, draft: str | None, records: str = "") -> None:
        """Load an example's tensors into the target (and the draft) in place, then redo what vLLM derives from
        them after loading (the CPU head's oneDNN handle); ``records``: where this example's records go."""
        from safetensors.torch import load_file
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

        runner = self.model_runner
        self._tpargmax_records = records
        models = [(runner.model, target)]
        if draft is not None:
            models.append((runner.drafter.model, draft))
        for model, path in models:
            model.load_weights(load_file(path).items())
        for model, _ in models:
            for module in model.modules():
                if isinstance(module, VocabParallelEmbedding):
                    module.quant_method.process_weights_after_loading(module)

    def tpargmax_take(self, path: str, forget: bool = True) -> int:
        """Write what the probe recorded since the last take (and the draft's head as it is now) to ``path`` with
        this rank's number in it; forget it (unless ``forget`` is False); return the number of steps.  A step whose
        proposal raised keeps its calls up to the one that raised, and says what it raised (``died``)."""
        tensors: dict[str, torch.Tensor] = {}
        steps = []
        model = self.model_runner.drafter.model
        tensors["head"] = model.lm_head.weight.detach().clone()
        d2t = getattr(model, "draft_id_to_target_id", None)
        if d2t is not None:
            tensors["d2t"] = d2t.detach().clone()
        for s, step in enumerate(self._tpargmax_steps):
            if "req_ids" not in step:  # still being proposed
                continue
            if "drafts" in step:
                tensors[f"step{s}.drafts"] = step["drafts"]
            for c, call in enumerate(step["calls"]):
                tensors |= {f"step{s}.call{c}.{k}": v for k, v in call.items()}
            steps.append({"step": s, "req_ids": step["req_ids"], "calls": len(step["calls"])})
            if "died" in step:
                steps[-1]["died"] = step["died"]
        meta = {"steps": steps, "verified": self._tpargmax_verified, "head": self._tpargmax_head_info()}
        save(tensors, path.format(rank=self.rank), {"probe": json.dumps(meta)})
        if forget:
            self._tpargmax_steps.clear()
            self._tpargmax_verified.clear()
        return len(steps)

    def tpargmax_plant(self, name: str | None) -> str | None:
        """Put the named broken local path into this worker (None: take back every plant); returns what it did."""
        while self._tpargmax_undo:
            owner, attr, original = self._tpargmax_undo.pop()
            setattr(owner, attr, original)
        if name is None:
            return None
        plants = importlib.import_module(PLANTS_MODULE).PLANTS
        if name not in plants:
            raise ValueError(f"no planted bug named {name!r}; known: {sorted(plants)}")
        owner, attr, broken = plants[name]()
        self._tpargmax_undo.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, broken)
        return f"{owner.__name__}.{attr}"
