"""The engine versions under test, one constant each, and the conformance pages named after them.

Imports nothing (no torch, no engine), so ``tpargmax``'s help and the install commands can read it cheaply.
"""

from __future__ import annotations

SGLANG_VERSION = "0.5.23"
VLLM_VERSION = "0.32.0"
TPU_INFERENCE_VERSION = "0.32.0"

# A page's path from the checkout's root, without its ending: the page is PAGE.md, its JSON PAGE.json, and its
# scripts lie in the folder PAGE/.
VLLM_PAGE = f"docs/conformance/vllm-{VLLM_VERSION}"
TPU_INFERENCE_PAGE = f"docs/conformance/tpu-inference-{TPU_INFERENCE_VERSION}"
SAMPLING_PAGE = "docs/conformance/sampling"  # the engines' samplers, side by side
