#!/usr/bin/env python3
"""The GPU evidence kit in one command (docs/gpu-evidence.md):

    python3 scripts/gpu_evidence.py [--budget SECONDS] [--pack FILE] [--only PHASE] [--dry-run] [--plan]

On a machine with an NVIDIA GPU and PyTorch it needs nothing installed: run from a checkout, it imports the
project from here, and where the project's Python dependencies are missing it installs the wheels that
scripts/gpu_evidence_wheels.py put in .whl/ (pip --target, no network) and runs again with them on the path.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".whl"
NEEDED = ("pydantic", "typer", "rich", "yaml", "jinja2", "pandas", "scipy", "matplotlib")
MARK = "MATRIX_KIT_SITE"


def missing() -> list[str]:
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def with_wheels() -> None:
    """Where a dependency is missing, install .whl/*.whl into a private folder and run this script again with
    it first on the path, so the versions this project was tested with win over the machine's (bench's
    processes inherit the path too)."""
    wheels = sorted(str(p) for p in WHEELS.glob("*.whl"))
    if not wheels or os.environ.get(MARK) or not missing():
        return
    site = Path(tempfile.gettempdir()) / "matrix-kit-site"
    print(f"[gpu-evidence] {', '.join(missing())} missing: installing {len(wheels)} wheels from .whl/ into {site}",
          flush=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                          "--no-cache-dir", "--upgrade", "--target", str(site), *wheels])
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
    from runner.kit.evidence import main as kit_main
    return kit_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
