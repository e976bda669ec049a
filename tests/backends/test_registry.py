"""The backend registry loads a backend only when asked, refuses a name twice, and a host without the
Docker SDK runs local matrices and says, once, what docker environments need."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner import backends
from runner.backends.base import Backend
from runner.base.errors import BackendError, ConfigError

ROOT = Path(__file__).resolve().parents[2]

# Runs the CLI in a fresh interpreter where `import docker` fails, as on a host without the extra.
NO_SDK = textwrap.dedent("""
    import sys
    sys.modules["docker"] = None
    sys.argv = ["matrix", *sys.argv[1:]]
    from runner.cli import main
    main()
""")


def test_a_name_registered_twice_is_refused() -> None:
    local = backends.get("local")
    impostor = type("Impostor", (Backend,), {"kind": "local", "config": local.config,
                                             "run": lambda self, tasks, sink: None})
    with pytest.raises(BackendError, match="'local' is registered twice"):
        backends.register(impostor)
    assert backends.get("local") is local


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown backend 'kubernetes'; allowed: docker, local, slurm"):
        backends.get("kubernetes")


def test_a_local_matrix_imports_neither_docker_nor_slurm(tmp_path: Path) -> None:
    probe = textwrap.dedent("""
        import sys
        from runner import matrix
        m = matrix.load(None)  # the embedded quickstart: local environments only
        m.cells()
        from runner import backends
        print(backends.loaded(), "docker" in sys.modules, "runner.backends.slurm" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                         check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.split("\n")[0] == "['local'] False False", out.stdout + out.stderr


def run_without_sdk(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "no_sdk.py"
    script.write_text(NO_SDK)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})


def test_without_the_docker_sdk_docker_environments_do_not_start_and_say_why_once(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(textwrap.dedent("""
        name: nosdk
        environments:
          - {name: box, backend: docker, image: "matrix/debian-torch:1.13"}
        axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}
        run: {iterations: 1, warmup: 0, repeats: 3}
    """))
    proc = run_without_sdk(tmp_path, "run", "-m", "m.yaml", "--db", "r.db")
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, said
    assert said.count("pip install 'matrix-bench[docker]'") == 1, said
    assert proc.returncode == 3, said
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("not started box: ")]
    assert "matrix-bench[docker]" in line and line.endswith("3 repeats not run, nothing stored (`matrix run` tries "
                                                            "them again)"), line
    with sqlite3.connect(tmp_path / "r.db") as db:
        assert db.execute("SELECT COUNT(*) FROM results").fetchone() == (0,)  # nothing was tried


def test_doctor_names_the_missing_docker_extra(tmp_path: Path) -> None:
    proc = run_without_sdk(tmp_path, "doctor")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "docker SDK" in ln)
    assert "missing" in line and "matrix-bench[docker]" in proc.stdout
