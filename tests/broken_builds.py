"""One broken path in two builds, for ``--baseline``'s test (tests/test_baseline.py): a contributor's base and
their change, under one implementation name, as vLLM's layer is ``vllm`` whatever build is installed.

The base lets ids at or past the logits vocabulary compete (``tests.broken:logits_vocab_ignored``); where
``BROKEN_SECOND_BUG`` is set, the change adds a second bug behind it: ties across ranks go to the higher rank.
"""

from __future__ import annotations

import os

from tests.broken import _unmasked, logits_vocab_ignored

_with_ties_to_the_higher_rank = _unmasked("ids >= vocab", higher_rank=True)


def two_builds(hidden, weight, bias, layout, *, scale=1.0, soft_cap=None, d2t=None, group):
    build = _with_ties_to_the_higher_rank if os.environ.get("BROKEN_SECOND_BUG") else logits_vocab_ignored
    return build(hidden, weight, bias, layout, scale=scale, soft_cap=soft_cap, d2t=d2t, group=group)
