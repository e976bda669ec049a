#!/usr/bin/env python3
"""The GPU evidence kit in one command (docs/gpu-evidence.md):

    python3 scripts/gpu_evidence.py [--budget SECONDS] [--pack FILE] [--only PHASE] [--dry-run] [--plan]

On a machine with an NVIDIA GPU and PyTorch it needs nothing installed: run from a checkout, it imports the
project from here, and where the project's Python dependencies are missing it installs the wheels that
scripts/gpu_evidence_wheels.py put in .whl/ (pip --target, no network) and runs again with them on the path:
only the wheels of distributions this machine lacks or has older, so a newer package already here is kept.
torchao (the GPT-2 phase's FP8 training) is installed only where the machine has none: a torchao of any version
already here was built for this machine's PyTorch and is kept; without one, the fp8 cells are `unsupported`.
What only the report needs (Jinja2, matplotlib, vl-convert) missing does not stop the measuring: the report is written
later, where they are, with --report-only.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".whl"
TO_MEASURE = ("pydantic", "typer", "rich", "yaml", "pandas", "scipy")  # matrix run imports these
TO_REPORT = ("jinja2", "matplotlib", "vl_convert")  # the report's figures and charts (vl-convert's PNGs)
FP8 = ("torchao",)  # the fp8 cells need it; the rest of the plan measures without
TO_TEST = ("pytest",)  # the GPU tests at the start of the first call; without it they say so and the kit measures on
KEEP_ANY = ("torchao",)  # tied to the PyTorch it was built for: a version already here is kept, older or not
MARK = "MATRIX_KIT_SITE"


def missing(modules: tuple[str, ...] = TO_MEASURE) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text.split("+")[0])[:4])


def wheels_to_install(wheels: list[Path]) -> list[Path]:
    """The wheels whose distribution this Python lacks, or has at an older version than the wheel's."""
    out = []
    for w in wheels:
        dist, version = w.name.split("-")[:2]
        try:
            have = importlib.metadata.version(dist.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            out.append(w)
            continue
        if dist.lower().replace("_", "-") not in KEEP_ANY and _version_key(have) < _version_key(version):
            out.append(w)
    return out


def with_wheels() -> None:
    """Where a dependency is missing, install the wheels it needs from .whl/ into a private folder and run this
    script again with that folder on the path (bench's processes inherit the path too)."""
    lacking = missing(TO_MEASURE + FP8 + TO_TEST)
    if os.environ.get(MARK) or not lacking:
        return
    wheels = wheels_to_install(sorted(WHEELS.glob("*.whl")))
    if not wheels:
        return
    site = Path(tempfile.gettempdir()) / "matrix-kit-site"
    print(f"[gpu-evidence] {', '.join(lacking)} missing: installing {len(wheels)} wheels from .whl/ into {site} "
          f"({', '.join(w.name.split('-')[0] for w in wheels)})", flush=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                          "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)])
    if pip.returncode != 0:
        sys.exit(f"gpu_evidence: error: pip could not install .whl/ for this Python ({sys.version.split()[0]}): "
                 "scripts/gpu_evidence_wheels.py --python-version X.Y fetches wheels for another one")
    path = [str(site), str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), MARK: str(site)}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main() -> int:
    with_wheels()
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]))
    gone = missing()
    if gone:
        print(f"gpu_evidence: error: this Python lacks {', '.join(gone)}: `pip install -e .` here, or run "
              "scripts/gpu_evidence_wheels.py on a machine that reaches PyPI and bring .whl/ along",
              file=sys.stderr)
        return 2
    later = missing(TO_REPORT)
    if later:
        print(f"[gpu-evidence] {', '.join(later)} missing: measuring anyway; the report is written where they are, "
              "with --report-only", flush=True)
    from runner.kit.evidence import main as kit_main
    return kit_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
