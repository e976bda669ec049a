#!/usr/bin/env python3
"""Download the Python packages the GPU evidence kit needs and a GPU machine's image lacks, as wheels for
CPython 3.12 on x86-64 Linux, into .whl/ (ignored by git): scripts/gpu_evidence.py installs them there with
`pip install --no-index --target`, no network needed (docs/gpu-evidence.md).

    python3 scripts/gpu_evidence_wheels.py [--dest .whl] [--python-version 3.12]

It needs no virtual environment: any python3 with pip does. Run from the project's virtual environment, the versions
are the ones installed there (the project's tested set); from any other interpreter, the pinned ones below. The GPU
machines' image has PyTorch, pandas, scipy, matplotlib, Jinja2, PyYAML and rich; it has no pydantic (and typer needs
it). torchao (FP8 training, the GPT-2 phase's fp8 cells) comes along too: scripts/gpu_evidence.py installs it only
where the machine has no torchao at all (one there, of any version, is the one built for its PyTorch, and kept).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# distribution name -> the version used when this interpreter does not have it
PACKAGES = {"pydantic": "2.14.3", "pydantic-core": "2.50.4", "annotated-types": "0.8.0",
            "typing-inspection": "0.4.5", "typing-extensions": "4.16.0", "typer": "0.29.2",
            "annotated-doc": "0.0.7", "torchao": "0.18.0",
            # the GPU tests at the start of the kit's first call (pytest -m gpu), and what pytest needs
            "pytest": "9.2.0", "pluggy": "1.7.0", "iniconfig": "2.3.1", "packaging": "26.4", "pygments": "2.21.0"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64")


def version(name: str) -> str:
    """The version installed in this virtual environment, else the pinned one (a system Python's own packages
    are not the project's tested set)."""
    if sys.prefix == sys.base_prefix:
        return PACKAGES[name]
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return PACKAGES[name]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dest", type=Path, default=ROOT / ".whl")
    p.add_argument("--python-version", default="3.12")
    args = p.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    wanted = {name: version(name) for name in PACKAGES}
    for old in args.dest.glob("*.whl"):  # one version of each: two would stop the install there
        dist = old.name.split("-")[0].lower().replace("_", "-")
        if dist in wanted and f"-{wanted[dist]}-" not in old.name:
            old.unlink()
    platforms = [a for plat in PLATFORMS for a in ("--platform", plat)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
           args.python_version, "--implementation", "cp", *platforms, "-d", str(args.dest),
           *(f"{n}=={v}" for n, v in wanted.items())]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    wheels = sorted(args.dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.1f} MiB in {args.dest}:")
    for w in wheels:
        print(f"  {w.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
