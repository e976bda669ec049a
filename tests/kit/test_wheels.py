"""The kit's start on a GPU machine (scripts/gpu_evidence.py): carried wheels install only what the machine lacks
or has older, a missing report dependency does not stop the measuring, and `make gpu-wheels` needs no virtual
environment."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT

KIT = ROOT / "scripts" / "gpu_evidence.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_evidence_script", KIT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_carried_wheels_never_shadow_a_newer_package_already_here(tmp_path: Path) -> None:
    """Every wheel in .whl/ was installed and put first on the path: an older typer or typing-extensions than the
    GPU machine's own replaced it for the kit and every benchmark it started."""
    have = importlib.metadata.version("typing_extensions")
    names = ["typing_extensions-0.0.1-py3-none-any.whl", f"typing_extensions-{have}-py3-none-any.whl",
             "typing_extensions-9999.0-py3-none-any.whl", "no_such_dist_here-1.0-py3-none-any.whl"]
    wheels = [tmp_path / n for n in names]
    chosen = [w.name for w in script().wheels_to_install(wheels)]
    assert chosen == ["typing_extensions-9999.0-py3-none-any.whl", "no_such_dist_here-1.0-py3-none-any.whl"]


def test_a_missing_report_dependency_does_not_stop_the_measuring(tmp_path: Path) -> None:
    code = ("import runpy, sys; sys.modules['jinja2'] = None; sys.modules['matplotlib'] = None; "
            f"sys.argv = ['gpu_evidence.py', '--dry-run', '--plan', '--state', {str(tmp_path / 's')!r}]; "
            f"runpy.run_path({str(KIT)!r}, run_name='__main__')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "jinja2, matplotlib missing: measuring anyway" in run.stdout and "] plan: " in run.stdout


def test_make_gpu_wheels_needs_no_virtual_environment() -> None:
    run = subprocess.run(["make", "-n", "gpu-wheels"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "scripts/gpu_evidence_wheels.py" in run.stdout
    assert "venv" not in run.stdout.replace(".venv/bin/python scripts", "") and "pip install" not in run.stdout


def test_torchao_is_carried_only_where_the_machine_has_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao is built for one PyTorch: a torchao already on the GPU machine, older or not, is kept; the wheel
    goes in only where there is none."""
    mod = script()
    wheel = tmp_path / "torchao-0.18.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
    monkeypatch.setattr(mod.importlib.metadata, "version", lambda dist: "0.9.0")
    assert mod.wheels_to_install([wheel]) == []

    def absent(dist: str) -> str:
        raise importlib.metadata.PackageNotFoundError(dist)
    monkeypatch.setattr(mod.importlib.metadata, "version", absent)
    assert mod.wheels_to_install([wheel]) == [wheel]


def test_a_machine_lacking_only_torchao_installs_its_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wheels were installed only when a dependency of the measuring was missing: a GPU machine with pydantic
    and typer but no torchao measured every fp8 cell as unsupported with the wheel at hand."""
    mod = script()
    (tmp_path / "torchao-0.18.0-cp310-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    monkeypatch.setattr(mod, "WHEELS", tmp_path)
    monkeypatch.delenv(mod.MARK, raising=False)
    monkeypatch.setattr(mod, "missing", lambda modules=mod.TO_MEASURE: [m for m in modules if m == "torchao"])

    def absent(dist: str) -> str:
        raise importlib.metadata.PackageNotFoundError(dist)
    monkeypatch.setattr(mod.importlib.metadata, "version", absent)
    calls: list[list[str]] = []

    class Done(Exception):
        pass

    def pip(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    def execve(*a: object) -> None:
        raise Done
    monkeypatch.setattr(mod.subprocess, "run", pip)
    monkeypatch.setattr(mod.os, "execve", execve)
    with pytest.raises(Done):
        mod.with_wheels()
    assert calls and calls[0][-1].endswith("torchao-0.18.0-cp310-abi3-manylinux_2_28_x86_64.whl")


def test_the_wheel_list_carries_torchao() -> None:
    spec = importlib.util.spec_from_file_location("wheels_script", ROOT / "scripts" / "gpu_evidence_wheels.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert "torchao" in mod.PACKAGES
