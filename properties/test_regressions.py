"""Every repro file in the repro directory (``--repro-dir``, default ``repro/``) replays as a regression test.

Each file's case runs against the implementation(s) under test, not the one that
failed, on the file's backend when that backend is selected.  A damaged file fails its test with one line.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from properties.harness.runner import nearest_tp
from properties.harness.settings import current
from properties.repro import records as repro


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "repro_file" in metafunc.fixturenames:
        files = sorted(Path(current().repro_dir).glob("*.json"))
        metafunc.parametrize("repro_file", files, ids=[f.stem for f in files])


def test_repro_file_replays_clean(impl, repro_file):
    try:
        record, inputs = repro.load(repro_file, device=current().device)
    except repro.DamagedRepro as exc:
        damaged = str(exc)
    else:
        damaged = ""
    if damaged:  # one line that names the file and what is wrong with it (raised outside the except: no chain)
        pytest.fail(damaged, pytrace=False)
    run = current()
    other = {k: v for k, v in run.pinned.items() if getattr(inputs.case, k) != v}
    if other:  # its tensors are another head's: nothing to replay on an implementation built for one head
        pytest.skip(f"the file's case is not the head the implementation fixes ({', '.join(sorted(other))} differ)")
    if inputs.backend not in run.backends:  # the same head, on a backend that runs
        backend = run.backends[0]
        inputs = replace(inputs.with_tp(nearest_tp(inputs.tp, backend)), backend=backend)
    extra = record.get("extra", {})
    if "k" in extra:  # a top-k find: replay it on the top-k implementations, beside ``impl``
        for topk_impl in run.topk_impls:
            repro.check({**record, "extra": {**extra, "argmax_impl": impl.spec}}, topk_impl, inputs)
    elif "sampling" in extra or "distribution" in extra:  # a sampler's find: replay it on the samplers
        for sampling_impl in run.sampling_impls:
            repro.check(record, sampling_impl, inputs)
    else:
        repro.check(record, impl, inputs)
