"""End-to-end repro files: the engines, the scenario and the property, replayed by starting the engines again.

A record holds no tensors: the scenario rebuilds the models (``engines.vllm.e2e.checkpoints``), and the engines
run them again.  It is read as untrusted input: every field is checked, the scenario rebuilt from its fields, the
engines from theirs, and a planted bug is only a name the project's own module must know.  Files go to
``REPRO_DIR/e2e/``, apart from the layer's repro files, which another format replays.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import platform
import re
from pathlib import Path
from typing import Any

from engines.versions import VLLM_VERSION
from engines.vllm.e2e.engine import EngineSpec
from engines.vllm.e2e.pool import EnginePool
from engines.vllm.e2e.scenario import Scenario
from properties.cases.case import shown
from properties.e2e import checks
from properties.repro.reader import read_json

FORMAT = "tpargmax-e2e-repro/1"
MAX_RECORD_BYTES = 1 << 20
ENGINES = {  # property -> how many engines its record names
    checks.DRAFT_TARGETS: 1,
    checks.DRAFT_ORACLE: 1,
    checks.LOSSLESS: 2,
    checks.SAME_DRAFTS: 2,
    checks.EXACT_ACCEPTANCE: 1,
}
PLANT_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def folder(repro_dir: str | Path) -> Path:
    return Path(repro_dir) / "e2e"


def write(repro_dir: str | Path, repro: dict[str, Any], blob: str | None, test: str) -> Path:
    record = {
        "format": FORMAT,
        "test": test,
        "property": repro["property"],
        "rule": repro["rule"],
        "engines": repro["engines"],
        "scenario": repro["scenario"],
        "plant": repro["plant"],
        "versions": {"vllm": VLLM_VERSION, "python": platform.python_version()},
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "hypothesis_blob": blob,
    }
    key = [record[k] for k in ("property", "engines", "scenario", "plant")]
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    name = EngineSpec(**repro["engines"][0]).name
    path = folder(repro_dir) / f"{test}-{name}-{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def is_e2e(path: Path) -> bool:
    """Whether the file claims this format (read cheaply: replay decides which reader judges it)."""
    try:
        return read_json(path, MAX_RECORD_BYTES, "a repro record").get("format") == FORMAT
    except (OSError, ValueError):
        return False


def read(path: Path) -> tuple[dict[str, Any], Scenario, list[EngineSpec], str | None]:
    """The record, its scenario, its engines and its plant; ``ValueError`` (one line) if anything is off."""
    record = read_json(path, MAX_RECORD_BYTES, "a repro record")
    if record.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file (format {shown(record.get('format'))})")
    prop = record.get("property")
    if prop not in ENGINES:
        raise ValueError(f"'property' must be one of {sorted(ENGINES)}, got {shown(prop)}")
    for name in ("rule", "test"):
        if not isinstance(record.get(name), str):
            raise ValueError(f"{name!r} must be a string, got {shown(record.get(name))}")
    engines = record.get("engines")
    if not isinstance(engines, list) or len(engines) != ENGINES[prop]:
        raise ValueError(f"'engines' must list {ENGINES[prop]} engine(s) for {prop!r}, got {shown(engines)}")
    specs = []
    for spec in engines:
        if not isinstance(spec, dict) or set(spec) != {"dtype", "method", "tp", "switch"}:
            raise ValueError(f"an engine is an object with dtype, method, tp and switch, got {shown(spec)}")
        if not isinstance(spec["tp"], int) or isinstance(spec["tp"], bool) or not isinstance(spec["switch"], bool):
            raise ValueError(f"an engine's tp is an int and its switch true or false, got {shown(spec)}")
        specs.append(EngineSpec(**spec))
    plant = record.get("plant")
    if plant is not None and not (isinstance(plant, str) and PLANT_NAME.fullmatch(plant)):
        raise ValueError(f"'plant' must be null or a planted bug's name, got {shown(plant)}")
    return record, Scenario.from_fields(record.get("scenario")), specs, plant


def check(prop: str, scenario: Scenario, specs: list[EngineSpec], pool: EnginePool, plant: str | None) -> None:
    """Run the recorded property on the recorded engines (started by ``pool``), with ``plant`` in every worker."""
    engines = [pool.get(spec, tuple(specs)) for spec in specs]
    pool.plant(plant)
    first = specs[0]
    if prop in (checks.DRAFT_TARGETS, checks.DRAFT_ORACLE):
        checks.check_draft_tokens(checks.generated(engines[0], scenario, None))
    elif prop == checks.LOSSLESS:
        run = checks.generated(engines[0], scenario, prop)
        checks.check_lossless(run, engines[1].run(scenario, target_of=first.method))
    elif prop == checks.SAME_DRAFTS:
        checks.check_same_drafts([checks.generated(e, scenario, prop) for e in engines])
    else:
        checks.check_exact_acceptance(checks.generated(engines[0], scenario, prop))
