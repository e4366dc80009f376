"""Read what ``pytest --hypothesis-show-statistics`` prints: examples and seconds per test, phase by phase."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TEST = re.compile(r"^(\S+::\S+):$")
_PHASE = re.compile(r"^\s+- during \w+ phase \(([\d.]+) seconds\):")
_COUNT = re.compile(r"^\s+- (\d+) passing, (\d+) failing, and (\d+) invalid")
_RUNTIME = re.compile(r"^\s+- Typical runtimes: (.+)$")


@dataclass
class TestStats:
    examples: int = 0  # valid examples (passing and failing) over every phase
    seconds: float = 0.0
    runtime: str = ""  # Hypothesis's "~ 3-12 ms, of which ~ 1-2 ms in data generation", first phase


class StatisticsReader:
    """Fed pytest's output line by line; ``tests`` maps each test id to its :class:`TestStats`."""

    def __init__(self) -> None:
        self.tests: dict[str, TestStats] = {}
        self._current: TestStats | None = None

    def feed(self, line: str) -> None:
        if match := _TEST.match(line):
            self._current = self.tests.setdefault(match.group(1), TestStats())
        elif self._current is None:
            return
        elif match := _PHASE.match(line):
            self._current.seconds += float(match.group(1))
        elif match := _COUNT.match(line):
            self._current.examples += int(match.group(1)) + int(match.group(2))
        elif (match := _RUNTIME.match(line)) and not self._current.runtime:
            self._current.runtime = match.group(1)
