"""SGLang 0.5.23's subjects without SGLang: the adapter's refusals and the install steps.

tests/test_sglang_kernels.py runs the wheel's kernels, where they are installed.
"""

from __future__ import annotations

import sys

import pytest
import torch

from engines.sglang.wheel import kernels as sglang
from engines.sglang.wheel.kernels import HEAD, SOFT_CAP, sglang_classic, sglang_deferred_argmax
from engines.versions import SGLANG_VERSION
from sharded.layout import vocab_parallel_layout

SUBJECTS = {"sglang_deferred_argmax": sglang_deferred_argmax, "sglang_classic": sglang_classic}


class _Group:
    rank, world_size = 0, 1

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        return t[None]


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_refuses_heads_sglang_never_defers(name: str) -> None:
    """Refused before any SGLang code runs: no soft cap, a d2t, fp16 logits, added ids."""
    fn = SUBJECTS[name]
    (lay,) = vocab_parallel_layout(100, 1)
    h, w = torch.zeros(2, 3), torch.zeros(lay.size, 3)
    bad = {
        "soft_cap": dict(soft_cap=None),
        "d2t": dict(soft_cap=SOFT_CAP, d2t=torch.zeros(100, dtype=torch.int64)),
        "dtype": dict(soft_cap=SOFT_CAP, hidden=h.half(), weight=w.half()),
    }
    for word, change in bad.items():
        with pytest.raises(ValueError, match=word):
            fn(**{"hidden": h, "weight": w, "bias": None, "layout": lay, "group": _Group(), **change})
    (added,) = vocab_parallel_layout(100, 1, added_vocab=8)
    with pytest.raises(ValueError, match="added_vocab=8"):
        fn(h, torch.zeros(added.size, 3), None, added, soft_cap=SOFT_CAP, group=_Group())
    assert fn.head == HEAD and getattr(fn, "path", "local") == ("classic" if name == "sglang_classic" else "local")


def test_install_steps_pin_the_wheel_without_dependencies() -> None:
    from tpargmax.install.sglang import steps

    install, check = steps()
    assert install[-4:] == ["pip", "install", "--no-deps", f"sglang=={SGLANG_VERSION}"] and check[0] == sys.executable
    assert sglang.SGLANG_VERSION == SGLANG_VERSION and "install-sglang" in sglang.INSTALL_HINT
