"""The pool's wire protocol: what a driver and its rank processes send each other over a connection.

Its own module so that :mod:`groups.pool` (the driver's side) and :mod:`groups.rank_process` (the
ranks' side) both import it and not each other.
"""

from __future__ import annotations

import ctypes
import io
import pickle
from multiprocessing.connection import Connection
from typing import Any

import torch


class _Pickler(pickle.Pickler):
    """Plain pickle, with plain CPU tensors as their raw bytes: torch's own pickling runs ``torch.save`` per
    tensor, about 300 us for one rank's arguments in the properties against 30 us this way."""

    def reducer_override(self, obj: object) -> object:
        if not _plain_cpu_tensor(obj):
            return NotImplemented
        storage = obj.untyped_storage()
        data = ctypes.string_at(storage.data_ptr(), storage.nbytes()) if storage.nbytes() else b""
        return _tensor, (data, obj.dtype, tuple(obj.shape), obj.stride(), obj.storage_offset())


def _plain_cpu_tensor(obj: object) -> bool:
    """A tensor that its bytes, dtype, shape, strides and offset describe whole (anything else: torch's pickling)."""
    return (
        type(obj) is torch.Tensor
        and obj.device.type == "cpu"
        and obj.layout == torch.strided
        and not (obj.requires_grad or obj.is_quantized or obj.is_conj() or obj.is_neg() or obj.__dict__)
    )


def _tensor(data: bytes, dtype: torch.dtype, size: tuple, stride: tuple, offset: int) -> torch.Tensor:
    """The tensor :class:`_Pickler` sent, in fresh memory from torch's allocator."""
    flat = torch.empty(len(data), dtype=torch.uint8)
    ctypes.memmove(flat.data_ptr(), data, len(data))
    return flat.view(dtype).as_strided(size, stride, offset)


def send(conn: Connection, obj: object) -> None:
    """Pickle: tensors travel by value, not as shared-memory handles tied to one process."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    conn.send_bytes(buf.getbuffer())


def recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())
