"""Adding a Docker-side engine is its module and one registration (runner/backends/docker/engines.py): a toy
engine registered at run time, which reaches the real Docker engine at its socket under another name, runs a real
repeat through `matrix run` with `engine: toy` while DOCKER_HOST points at nothing, and `matrix doctor` lists it;
while it is not registered, `engine: toy` is refused in one line naming the file, the field and the allowed names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from runner.backends.base import Probe
from runner.backends.docker import DockerBackend, engine
from runner.backends.docker.engine_docker import DockerKind
from runner.backends.docker.engines import ENGINES, register
from runner.base.errors import BackendError
from runner.cli import app
from tests.backends.docker.dockertools import IMAGE, rows, write_matrix

pytestmark = pytest.mark.docker

DOCKER_ONLY = pytest.mark.parametrize("engine_kind", ["docker"], indirect=True)
MATRIX = f"""
name: toy-engine
environments:
  - {{name: boxed, backend: docker, image: "{IMAGE}", engine: toy, env: {{OMP_NUM_THREADS: "1"}}}}
axes: {{model: [mnist_cnn], precision: [fp32], batch_size: [16], device: [cpu]}}
run: {{iterations: 2, warmup: 1, repeats: 1, timeout: 120}}
"""


class Toy(DockerKind):
    """Docker's engine under another name, at the socket it is given, whatever DOCKER_HOST says."""

    name = "toy"
    bring_up = "(toy: start dockerd)"
    socket = ""
    built: ClassVar[list[str]] = []  # the clients this engine's own code built: proof that connect asked it

    def address(self) -> str:
        return self.socket

    def base_url(self) -> str | None:
        Toy.built.append(self.socket)
        return self.socket

    def unreachable(self, where: str) -> str:
        return f"no toy engine answers at {where}"

    def absent(self, why: str) -> Probe:
        return Probe("toy engine", None, why)


@pytest.fixture
def toy(docker_client: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Toy]:
    """The toy engine at the real Docker engine's socket; DOCKER_HOST then points at no engine at all, so what
    runs runs through the toy's own client."""
    Toy.socket = engine.default_address().split(" (context ")[0]
    Toy.built = []
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    register(Toy())
    try:
        yield Toy()
    finally:
        ENGINES.forget("toy")


@DOCKER_ONLY
def test_a_toy_engine_registered_at_run_time_runs_a_real_repeat_and_doctor_lists_it(
        toy: Toy, tmp_path: Path, run_label_gone: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    write_matrix(tmp_path / "m.yaml", MATRIX)
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w"])
    assert done.exit_code == 0, done.output
    (row,) = rows(tmp_path / "r.db")
    assert row["status"] == "ok", row["reason"] + row["log_tail"]
    assert row["env"]["container_runtime"] == "toy" and row["env"]["torch"].startswith("1.13")
    assert Toy.built and set(Toy.built) == {toy.socket}, Toy.built
    assert run_label_gone(row["run_id"]) == []

    said = " ".join(CliRunner().invoke(app, ["doctor"]).output.split())
    assert "toy engine" in said and "toy test image" in said and "nonexistent/docker.sock" in said, said
    checks = {c.name: c for c in DockerBackend.doctor()}
    assert checks["toy engine"].ok is True and checks["toy engine"].detail.startswith("Docker "), checks["toy engine"]
    assert toy.socket in checks["toy engine"].detail and checks["toy test image"].ok is True
    assert checks["docker engine"].ok is False  # DOCKER_HOST answers nothing: only the toy reached Docker


def test_an_engine_name_is_known_only_while_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_matrix(tmp_path / "m.yaml", MATRIX)
    monkeypatch.chdir(tmp_path)
    refused = CliRunner().invoke(app, ["plan", "-m", "m.yaml"])
    assert refused.exit_code == 2, refused.output
    said = " ".join(refused.output.split())
    assert "m.yaml: environments[0].engine (line 4): 'toy' is not allowed; allowed: 'docker' or 'podman'" in said
    register(Toy())
    try:
        assert CliRunner().invoke(app, ["plan", "-m", "m.yaml"]).exit_code == 0
        with pytest.raises(BackendError, match="registered twice"):
            register(Toy())
    finally:
        ENGINES.forget("toy")
