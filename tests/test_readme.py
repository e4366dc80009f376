"""README stays true: CI runs its two commands, and its example is the file the plug-in test runs."""

from __future__ import annotations

import re
from pathlib import Path

from properties.profiles import BACKEND_SHARE, CI_EXAMPLES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_ci_runs_the_readme_commands():
    setup, test = re.search(r"```bash\n(.+?)\n(.+?)\n```", README).groups()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert setup in ci and test in ci.splitlines(), "README's two commands and .ci/run drifted apart"


def test_readme_example_is_the_tested_file():
    source = (ROOT / "examples" / "float64_pairs.py").read_text(encoding="utf-8")
    body = source.split('"""', 2)[2].strip()
    assert f"```python\n{body}\n```" in README, "README's example differs from examples/float64_pairs.py"
    assert len(source.splitlines()) < 30


def test_readme_states_the_example_budgets_the_profiles_set():
    gloo = round(CI_EXAMPLES * BACKEND_SHARE["gloo"])
    assert f"({CI_EXAMPLES} per property on the simulated group, {gloo} on gloo)" in README
    assert f"{CI_EXAMPLES} examples per property on `sim`, {gloo} on `gloo`" in README
