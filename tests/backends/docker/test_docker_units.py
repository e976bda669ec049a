"""The docker backend's pure parts, and what it says when no engine answers (no engine needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.backends import docker as dk
from runner.backends.base import NotStarted
from runner.backends.context import RunContext
from runner.backends.docker import engine, payload
from runner.backends.docker import engine_podman as podman
from runner.backends.docker.engines import ENGINES
from runner.base.errors import ConfigError
from runner.domain.cells import Cell, RunSettings, Task


@pytest.mark.parametrize(("image", "name"), [
    ("nvcr.io/nvidia/pytorch:18.07-py3", "pytorch-18.07-py3"),
    ("nvcr.io/nvidia/pytorch:24.10-py3", "pytorch-24.10-py3"),
    ("matrix/debian-torch:1.13", "debian-torch-1.13"),
    ("localhost:5000/team/img", "img"),
    ("pytorch/pytorch@sha256:" + "ab" * 32, "pytorch-sha256-abababababab"),
])
def test_adhoc_environment_is_named_after_the_image(image: str, name: str) -> None:
    env = dk.adhoc_environment(image, None)
    assert env.name == name and env.image == image and env.backend == "docker"
    assert env.gpus is None and env.network == "none" and env.shm_size == "8g"
    assert "container" in env.tags


@pytest.mark.parametrize(("text", "gpus"), [
    (None, None), ("all", "all"), ("ALL", "all"), ("2", 2), ("0", None), ("0,1", [0, 1]),
    ("device=1", [1]), ("device=0,2", [0, 2]), ("none", None),
])
def test_gpus_option_parses_like_docker(text: str | None, gpus: object) -> None:
    assert dk.parse_gpus(text) == gpus
    assert dk.adhoc_environment("img:1", text).gpus == gpus


@pytest.mark.parametrize("bad", ["some", "-1", "1.5", "device=", "0,x"])
def test_bad_gpus_option_is_a_config_error_naming_the_allowed_values(bad: str) -> None:
    with pytest.raises(ConfigError, match="allowed: all"):
        dk.parse_gpus(bad)


def test_gpus_become_device_requests() -> None:
    assert engine.device_requests(None) == []
    (everything,) = engine.device_requests("all")
    assert everything["Count"] == -1 and everything["Capabilities"] == [["gpu"]]
    (two,) = engine.device_requests(2)
    assert two["Count"] == 2
    (ids,) = engine.device_requests([0, 3])
    assert ids["DeviceIDs"] == ["0", "3"] and not ids.get("Count")


def test_environment_rejects_negative_gpus() -> None:
    with pytest.raises(ValueError, match="gpus"):
        dk.DockerEnvironment(name="x", image="img", gpus=-1)
    with pytest.raises(ValueError, match="gpus"):
        dk.DockerEnvironment(name="x", image="img", gpus=[])


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")


def test_doctor_without_engine_says_how_to_start_one(no_engine: None) -> None:
    sdk, check, *podman = dk.DockerBackend.doctor()  # then Podman's API, answering or not
    assert sdk.name == "docker SDK" and sdk.ok is True
    assert check.ok is False and "make services" in check.detail and "no-such-docker.sock" in check.detail


def test_clean_without_engine_removes_nothing(no_engine: None) -> None:
    assert dk.DockerBackend.clean() == []


def test_the_environment_does_not_start_with_the_hint_when_no_engine_answers(no_engine: None, tmp_path: Path) -> None:
    env = dk.DockerEnvironment(name="box", image="img:1")
    cell = Cell(env, {"model": "mnist_cnn"}, RunSettings(iterations=2, warmup=1, repeats=2, timeout=60, seed=0))
    got: list[tuple[Task, object]] = []
    with pytest.raises(NotStarted, match="no Docker engine answers"), \
            dk.DockerBackend(env, RunContext("r1", tmp_path)) as backend:
        backend.run([Task(cell, 0), Task(cell, 1)], lambda t, o: got.append((t, o)))
    assert got == []  # no outcome: the run stores nothing for tasks that were never tried


class FakeImages:
    def __init__(self) -> None:
        self.pulled = False

    def get(self, ref: str) -> Any:
        from docker.errors import ImageNotFound
        if not self.pulled:
            raise ImageNotFound(f"no such image: {ref}")
        return type("Image", (), {"id": "sha256:" + "1" * 64, "labels": {"matrix.era": "2018"},
                               "attrs": {"RepoDigests": [f"{ref}@sha256:{'2' * 64}"]}})()


class FakeClient:
    """Just enough of DockerClient for the pull path: `api.pull` streams the engine's events."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.images = FakeImages()
        self.api = self
        self.events = events

    def pull(self, ref: str, stream: bool, decode: bool) -> Iterator[dict[str, Any]]:
        assert stream and decode
        yield from self.events
        self.images.pulled = True


REF = "nvcr.io/nvidia/pytorch:18.07-py3"


def test_missing_image_is_pulled_with_progress_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    client = FakeClient([
        {"status": "Pulling from nvidia/pytorch", "id": "18.07-py3"},
        {"status": "Pulling fs layer", "id": "a"},
        {"status": "Downloading", "id": "a", "progressDetail": {"current": 512, "total": 1024}},
        {"status": "Downloading", "id": "b", "progressDetail": {"current": 10, "total": 100}},
        {"status": "Pull complete", "id": "a"},
        {"status": "Already exists", "id": "b"},
        {"status": "Digest: sha256:" + "2" * 64},
    ])
    image = engine.Engine(client).image(REF, "missing")
    assert image.id.startswith("sha256:") and client.images.pulled and image.repo_digest
    assert image.labels == {"matrix.era": "2018"}
    assert "pulling nvcr.io/nvidia/pytorch:18.07-py3" in capsys.readouterr().err


def test_pull_error_event_is_the_environments_failure(tmp_path: Path) -> None:
    client = FakeClient([{"status": "Pulling fs layer", "id": "a"},
                         {"error": "manifest for nvcr.io/nvidia/pytorch:18.07-py3 not found", "errorDetail": {}}])
    with pytest.raises(NotStarted, match="pulling it failed: manifest .* not found"):
        engine.Engine(client).image(REF, "missing")


def test_pull_never_names_the_missing_image(tmp_path: Path) -> None:
    with pytest.raises(NotStarted, match="'local/only:1' is not on this engine .* pull: never"):
        engine.Engine(FakeClient([])).image("local/only:1", "never")


def python36() -> str | None:
    """The Python 3.6 that 2018 images carry, where this machine has one (pyenv)."""
    import shutil
    import subprocess
    pyenv = shutil.which("pyenv")
    if not pyenv:
        return None
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
    path = Path(root) / "versions" / "3.6.15" / "bin" / "python3.6"
    return str(path) if path.exists() else None


def test_in_container_helpers_run_on_python_3_6(tmp_path: Path) -> None:
    """The probe and the kill helper run with the image's python: 2018 images have 3.6."""
    import subprocess
    py = python36()
    if py is None:
        pytest.skip("no Python 3.6 here (pyenv install 3.6.15)")
    probe = subprocess.run([py, "-c", payload.PROBE], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    executable, version, torch = probe.stdout.split()
    assert version.startswith("3.6.") and torch in ("torch", "no-torch")
    (tmp_path / "kill.py").write_bytes(payload.KILLER)
    victim = subprocess.Popen([py, "-c", "import time; time.sleep(60)"], env={"MATRIX_TASK": "t-1"})
    bystander = subprocess.Popen([py, "-c", "import time; time.sleep(60)"], env={"MATRIX_TASK": "t-2"})
    try:
        subprocess.run([py, str(tmp_path / "kill.py"), "MATRIX_TASK", "t-1"], check=True, timeout=60)
        assert victim.wait(timeout=10) == -9
        assert bystander.poll() is None  # another task's process is left alone
    finally:
        victim.kill()
        bystander.kill()


def test_naming_an_engine_measures_anew_and_leaving_it_unset_keeps_the_old_keys() -> None:
    settings = RunSettings()
    plain = Cell(dk.DockerEnvironment(name="e", image="img:1"), {"model": "mlp"}, settings)
    docker = Cell(dk.DockerEnvironment(name="e", image="img:1", engine="docker"), {"model": "mlp"}, settings)
    podman = Cell(dk.DockerEnvironment(name="e", image="img:1", engine="podman"), {"model": "mlp"}, settings)
    assert "engine" not in plain.environment.identity()  # a key stored before `engine` existed stays valid
    assert len({plain.key, docker.key, podman.key}) == 3


@pytest.mark.parametrize(("gpus", "devices"), [
    (None, []), (0, []), ("all", ["nvidia.com/gpu=all"]), (2, ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]),
    ([1, 3], ["nvidia.com/gpu=1", "nvidia.com/gpu=3"]),
])
def test_gpus_go_to_podman_as_cdi_devices_and_never_as_device_requests(gpus: Any, devices: list[str]) -> None:
    if engine.SDK_MISSING:
        pytest.skip(engine.SDK_MISSING)
    spec = engine.BoxSpec(image_id="i", name="n", labels={}, env={}, network="none", mounts=(), gpus=gpus)
    options = spec.options(ENGINES.get("podman"))
    assert options["devices"] == devices and "device_requests" not in options
    assert spec.options(ENGINES.get("docker"))["device_requests"] == engine.device_requests(gpus)
    assert "devices" not in spec.options(ENGINES.get("docker"))
    assert podman.cdi_devices(gpus) == devices


def test_podman_is_found_where_the_user_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MATRIX_PODMAN_HOST", "unix:///srv/podman.sock")
    monkeypatch.setenv("CONTAINER_HOST", "unix:///other.sock")
    assert podman.podman_address() == "unix:///srv/podman.sock"
    monkeypatch.delenv("MATRIX_PODMAN_HOST")
    assert podman.podman_address() == "unix:///other.sock"  # Podman's own variable
    monkeypatch.delenv("CONTAINER_HOST")
    assert podman.podman_address().endswith("/podman/podman.sock")
    assert "podman system service" in engine.engine_hint("podman")


def test_an_environment_on_podman_without_its_service_does_not_start_with_the_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if engine.SDK_MISSING:
        pytest.skip(engine.SDK_MISSING)
    monkeypatch.setenv("MATRIX_PODMAN_HOST", f"unix://{tmp_path}/no-such-podman.sock")
    env = dk.DockerEnvironment(name="box", image="img:1", engine="podman")
    cell = Cell(env, {"model": "mnist_cnn"}, RunSettings(iterations=2, warmup=1, repeats=1, timeout=60, seed=0))
    got: list[Any] = []
    with pytest.raises(NotStarted) as refused, dk.DockerBackend(env, RunContext("r1", tmp_path)) as backend:
        backend.run([Task(cell, 0)], lambda t, o: got.append(o))
    reason = str(refused.value)
    assert got == [] and "no Podman API answers" in reason and "podman system service --time=0" in reason
    assert "no-such-podman.sock" in reason
