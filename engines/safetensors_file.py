"""Writing a safetensors file from torch memory, through the safetensors library's own serializer.

``safetensors.torch.save_file`` needs NumPy, which the project's default environment never installs; the library's
``serialize_file`` takes each tensor's bytes where torch holds them.  Reading needs nothing more: ``safe_open`` with
``framework="pt"``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import TensorSpec, serialize_file


def save(tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """``tensors`` (on the CPU, any dtype safetensors knows) to ``path``, with text ``metadata``."""
    held = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}  # alive until the file is written
    specs = {
        name: TensorSpec(
            dtype=str(t.dtype).removeprefix("torch."),
            shape=list(t.shape),
            data_ptr=t.data_ptr(),
            data_len=t.numel() * t.element_size(),
        )
        for name, t in held.items()
    }
    serialize_file(specs, str(path), metadata=metadata)
