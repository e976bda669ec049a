"""The device a kit state belongs to: its name, memory, driver and CUDA version, probed in a child process (the
kit's own process never starts CUDA: each repeat's benchmark does), kept in the state's `device.json`.

A state measured on one device refuses another: an H200's repeats never join an H100's cells, and the report
folder is named after the device the state belongs to. No usable CUDA device is an error of the run.

    python -m runner.kit.device      # one JSON line: the identity, or {"error": "..."}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner.base import safewrite
from runner.base.errors import MatrixError
from runner.base.exitcodes import Exit

IDENTITY = ("name", "memory_mib", "driver", "cuda")
DRY_RUN = {"name": "cpu-dry-run", "memory_mib": None, "driver": None, "cuda": None}
PROBE_TIMEOUT_S = 120


class DeviceError(MatrixError):
    """No usable CUDA device, or a state that belongs to another one."""

    exit_code = Exit.USAGE


def probe() -> dict[str, Any]:
    """The first CUDA device as PyTorch sees it, or {"error": why}."""
    try:
        import torch
    except Exception as e:  # a broken install is said, not raised
        return {"error": f"PyTorch is not importable here ({type(e).__name__}: {e})"}
    try:
        if not torch.cuda.is_available():
            return {"error": f"torch.cuda.is_available() is False (torch {torch.__version__}, built for CUDA "
                             f"{torch.version.cuda or 'none'}): no usable CUDA device"}
        props = torch.cuda.get_device_properties(0)
        return {"name": str(props.name), "memory_mib": int(props.total_memory) // 2**20, "driver": _driver(),
                "cuda": torch.version.cuda, "capability": f"{props.major}.{props.minor}",
                "torch": torch.__version__, "count": torch.cuda.device_count()}
    except Exception as e:
        return {"error": f"CUDA did not start ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"}


def _driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        first = out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
        return first or None
    except (OSError, subprocess.SubprocessError):
        return None


def identify(pythonpath: str) -> dict[str, Any]:
    """The probe in a child process; DeviceError in one line when there is no usable CUDA device."""
    try:
        proc = subprocess.run([sys.executable, "-m", "runner.kit.device"], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": pythonpath})
    except subprocess.TimeoutExpired:
        raise DeviceError(f"no usable CUDA device: the device probe did not answer in {PROBE_TIMEOUT_S} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    try:
        found: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except ValueError:
        found = {}
    if not found or "error" in found:
        why = found.get("error") or f"the device probe ended with exit {proc.returncode} and no answer"
        raise DeviceError(f"{why}; nothing was measured (on a CPU, --dry-run runs the kit's code path)")
    return found


def text(identity: dict[str, Any]) -> str:
    mem = identity.get("memory_mib")
    return (f"{identity.get('name')} ({f'{mem} MiB' if mem else 'memory unknown'}, driver "
            f"{identity.get('driver') or 'unknown'}, CUDA {identity.get('cuda') or 'none'})")


def bind(state: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """The state's device: this one when the state has none yet; DeviceError when it belongs to another."""
    path = state / "device.json"
    try:
        kept = json.loads(path.read_text())
    except FileNotFoundError:
        kept = None
    except (OSError, ValueError) as e:
        raise DeviceError(f"{path}: not readable as the state's device ({e}); move the state aside") from None
    if kept is not None and not isinstance(kept, dict):
        raise DeviceError(f"{path}: not a device record (a JSON object with {', '.join(IDENTITY)}); move the "
                          "state aside")
    if isinstance(kept, dict):
        if any(kept.get(k) != identity.get(k) for k in IDENTITY):
            raise DeviceError(f"{state} belongs to {text(kept)}, this is {text(identity)}: its repeats must not "
                              f"mix; give this device its own state (--state {state}-{slug(identity)})")
        return kept
    state.mkdir(parents=True, exist_ok=True)
    safewrite.write_text(path, json.dumps({k: identity.get(k) for k in (*IDENTITY, "capability", "torch")}, indent=1))
    return identity


def kept(state: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((state / "device.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def slug(identity: dict[str, Any]) -> str:
    from runner.report.render import slug as _slug
    return str(_slug(str(identity.get("name") or "gpu").lower().replace(" ", "-")))


if __name__ == "__main__":
    print(json.dumps(probe()), flush=True)
    sys.exit(0)
