"""The suite's own options, checked where conftest reads them: bad ones are usage errors that name the problem,
and the Hypothesis profile is ``dev`` unless one is given or the run is in CI."""

from __future__ import annotations

import sys

import pytest
from hypothesis import settings

import conftest
from conftest import read_xfails
from groups.simulated import DEFAULT_TIMEOUT
from properties.harness.settings import current
from sharded.impls import Impl, load_impl

DEFAULTS = {
    "collective_timeout": DEFAULT_TIMEOUT,
    "hypothesis_profile": "ci",
    "max_examples": None,
    "gloo_tps": None,
    "backend": "sim,gloo",
    "device": "cpu",
    "impl": None,
}


class Options:
    """What conftest reads of pytest's config, and nothing else."""

    def __init__(self, **given: object) -> None:
        self.values = {**DEFAULTS, **given}

    def getoption(self, name: str, default: object = None) -> object:
        return self.values.get(name, default)


@pytest.fixture
def configure(kept_settings):
    """conftest's pytest_configure on the given options; the run's settings and profile are put back afterwards."""
    profile = settings.get_current_profile_name()
    yield lambda **given: conftest.pytest_configure(Options(**given))
    settings.load_profile(profile)


@pytest.mark.parametrize(
    "given, words",
    [
        ({"impl": "vllm_pairs,no_such_module:fn"}, "--impl 'no_such_module:fn': cannot load it"),
        ({"impl": "vllm_pairs:"}, "use a built-in name"),
        ({"backend": "sim,nccl"}, "--backend: choose from sim, gloo, torchrun, got ['nccl']"),
        ({"backend": "torchrun"}, "start the suite with torchrun -m properties.torchrun"),
        ({"gloo_tps": "2,x"}, "--gloo-tps: expected comma-separated ints, got '2,x'"),
        ({"gloo_tps": "0"}, "--gloo-tps: sizes must be >= 1"),
        ({"layouts": "dp,even"}, "--layouts: choose from diverged, dp, uneven or none, got ['even']"),
    ],
)
def test_a_bad_option_is_a_usage_error_naming_it(configure, given, words):
    with pytest.raises(pytest.UsageError) as info:
        configure(**given)
    assert words in str(info.value)


def test_several_implementations_are_tested_side_by_side(configure):
    config = Options(impl="vllm_pairs, examples.float64_pairs:local_argmax,vllm_pairs")
    conftest.pytest_configure(config)
    assert [i.spec for i in current().impls] == ["vllm_pairs", "examples.float64_pairs:local_argmax"]


class _Item:
    """What conftest's layout rule reads of a collected property: its layout marker."""

    def __init__(self, layout: str) -> None:
        self.marker = pytest.mark.layout(layout).mark

    def get_closest_marker(self, name: str):
        return self.marker if name == "layout" else None


@pytest.mark.parametrize(
    "given, layout, spec, why",
    [
        ({}, "dp", "vllm_pairs", None),
        ({"layouts": "none"}, "diverged", "vllm_pairs", "--layouts leaves out diverged"),
        ({"layouts": "dp"}, "uneven", "vllm_pairs", "--layouts leaves out uneven"),
        ({"layouts": "dp"}, "dp", "examples.float64_pairs:local_argmax", "takes no dp_rows keyword"),
        ({}, "uneven", "examples.float64_pairs:local_argmax", None),
    ],
)
def test_a_layout_the_implementation_does_not_take_is_skipped_with_the_reason(configure, given, layout, spec, why):
    configure(**given)
    found = conftest._subject_skip(_Item(layout), [load_impl(spec)])
    assert (found is None) if why is None else (why in found), found


@pytest.mark.parametrize("in_ci, profile", [(False, "dev"), (True, "ci")])
def test_the_profile_is_dev_outside_ci(configure, monkeypatch, in_ci, profile):
    monkeypatch.setattr(conftest, "is_in_ci", lambda: in_ci)
    settings.load_profile("ci")  # what Hypothesis itself loads when it detects CI
    configure(hypothesis_profile=None)
    assert settings.get_current_profile_name() == profile


def test_an_xfail_without_a_reason_is_a_usage_error(tmp_path):
    xfails = tmp_path / "xfails.txt"
    xfails.write_text("test_token_exact  # a reason\n\ntest_output_contract\n")
    with pytest.raises(pytest.UsageError, match=r"xfails.txt:3: give a reason after '#' for 'test_output_contract'"):
        read_xfails(str(xfails))


def test_a_module_that_refuses_its_environment_stays_out_of_the_suites_import(tmp_path, monkeypatch):
    """vLLM's Triton kernels raise RuntimeError where Triton is installed and vLLM is not: the run still starts,
    with the modules that do import imported."""
    package = tmp_path / "tpargmax_probe_suite"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "refuses.py").write_text("raise RuntimeError('vLLM is not installed')\n")
    (package / "imports.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(conftest, "SUITE_PACKAGES", ("tpargmax_probe_suite",))
    conftest.import_the_suite()
    assert "tpargmax_probe_suite.imports" in sys.modules and "tpargmax_probe_suite.refuses" not in sys.modules


def test_a_layout_an_implementation_declares_it_does_not_take_is_skipped_with_its_reason(configure):
    """An engine's subject declares its layouts (``fn.layouts``, ``fn.layouts_why``), as vLLM's layer does."""
    configure()

    def even_only(**kwargs):
        raise AssertionError("a skipped layout never runs")

    even_only.layouts, even_only.layouts_why = ("diverged",), "its head is cut evenly"
    impl = Impl("engine:even_only", even_only)
    assert conftest._subject_skip(_Item("diverged"), [impl]) is None
    assert (
        conftest._subject_skip(_Item("uneven"), [impl])
        == "engine:even_only takes no uneven layout: its head is cut evenly"
    )


def test_a_corrected_subject_takes_the_keywords_of_the_subject_it_corrects():
    """engines.findings.corrected wraps a subject in a call of any keywords: attention data parallel still skips a
    subject whose own signature has no dp_rows, rather than handing it one."""
    from engines.findings import corrected

    def subject(*, hidden, weight, bias, layout, scale, soft_cap, d2t, group):
        raise AssertionError("never called")

    impl = Impl("engine:subject (corrected)", corrected(subject, (), "subject"))
    assert not impl.takes_dp_rows and "takes no dp_rows keyword" in impl.refuses_layout("dp")
