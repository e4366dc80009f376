"""SGLang's functions from its wheel's files, without importing ``sglang`` (which needs ``orjson`` and the rest):
:func:`engines.source_functions.source_functions` with SGLang's imports left out."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from engines.source_functions import source_functions
from engines.versions import SGLANG_VERSION


def wheel_functions(
    name: str, path: Path, keep: tuple[str, ...] | None, given: dict[str, Any], drop: tuple[str, ...] = ()
) -> types.ModuleType:
    """``path``'s functions named in ``keep`` (every one where None), SGLang's names from ``given``."""
    module_name = f"tpargmax_sglang_{SGLANG_VERSION.replace('.', '_')}_{name}"
    return source_functions(module_name, path, keep, given, ("sglang",), drop)
