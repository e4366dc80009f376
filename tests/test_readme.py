"""README stays true: CI runs its two commands, its example is the file the plug-in test runs, it stays a
front page, and every link in it and in docs/ leads to a file and a heading that exist."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from hypothesis import settings

from properties.harness.profiles import BACKEND_SHARE, CI_EXAMPLES, budget

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = sorted((ROOT / "docs").rglob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def page(name: str) -> str:
    return (ROOT / "docs" / name).read_text(encoding="utf-8")


def test_ci_runs_the_readme_commands():
    setup, test = re.search(r"```bash\n(.+?)\n(.+?)\n```", README).groups()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert setup in ci and test in ci.splitlines(), "README's two commands and .ci/run drifted apart"


def test_readme_example_is_the_tested_file():
    source = (ROOT / "examples" / "float64_pairs.py").read_text(encoding="utf-8")
    body = source.split('"""', 2)[2].strip()
    assert f"```python\n{body}\n```" in README, "README's example differs from examples/float64_pairs.py"
    assert len(source.splitlines()) < 30


def test_readme_and_the_profiles_page_state_the_example_budgets_the_profiles_set():
    gloo = round(CI_EXAMPLES * BACKEND_SHARE["gloo"])
    assert f"({CI_EXAMPLES} per property on the simulated group, {gloo} on gloo)" in README
    profiles = page("profiles.md")
    assert f"{CI_EXAMPLES} examples per property on `sim`, {gloo} on `gloo`" in profiles
    for name in ("dev", "nightly"):
        (row,) = [line for line in profiles.splitlines() if line.startswith(f"| `{name}` |")]
        assert f"{settings.get_profile(name).max_examples:,} examples per property" in row, name


def test_the_throughput_table_shows_each_property_its_budget():
    """The example counts of docs/profiles.md's throughput table are what the ci profile gives each property, once
    per parametrization."""
    rows = re.findall(r"^(test_\w+) +(sim|gloo) +(\d+) ", page("profiles.md"), flags=re.M)
    assert len(rows) >= 20
    for test, backend, examples in rows:  # a row sums a property's parametrizations (heads, implementations)
        assert int(examples) % budget(test, backend) == 0, (test, backend)


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 200, "README is a front page: move the details to a page under docs/"
    named = set(re.findall(r"\]\((docs/[\w/.-]+\.md)", README))
    assert len(named) >= 10
    for path in named:
        assert (ROOT / path).is_file(), path


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found, seen, fence = set(), {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (match := re.match(r"#{1,6} (.+)", line)):
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


@cache
def anchors_of(page: Path) -> set[str]:
    """A page's anchors, read once: a conformance page links to its own failures hundreds of times."""
    return anchors(page.read_text(encoding="utf-8"))


def links(text: str) -> list[str]:
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # links inside code blocks are code
    return [target for target in LINK.findall(prose) if not re.match(r"[a-z]+:", target)]


def test_every_relative_link_in_readme_and_docs_resolves():
    assert len(PAGES) >= 10
    assert slug("Backends: where the ranks run") == "backends-where-the-ranks-run"
    assert slug("Is my draft's d2t table safe?") == "is-my-drafts-d2t-table-safe"
    checked = 0
    for source in [ROOT / "README.md", *PAGES]:
        for target in links(source.read_text(encoding="utf-8")):
            path, _, anchor = target.partition("#")
            where = (source.parent / path).resolve() if path else source
            assert where.exists(), f"{source.relative_to(ROOT)}: {target} names no file"
            if anchor and where.suffix == ".md":
                assert anchor in anchors_of(where), (
                    f"{source.relative_to(ROOT)}: {target} names no heading of {where.relative_to(ROOT)}"
                )
            checked += 1
    assert checked >= 40
