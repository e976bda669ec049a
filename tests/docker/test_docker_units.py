"""The docker backend's pure parts, and what it says when no engine answers (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.backends import docker as dk
from runner.errors import ConfigError
from runner.results import Status
from runner.spec import Cell, RunContext, RunSettings, Task


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
    assert dk.device_requests(None) == []
    (everything,) = dk.device_requests("all")
    assert everything["Count"] == -1 and everything["Capabilities"] == [["gpu"]]
    (two,) = dk.device_requests(2)
    assert two["Count"] == 2
    (ids,) = dk.device_requests([0, 3])
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
    (check,) = dk.DockerBackend.doctor()
    assert check.ok is False and "make services" in check.detail and "no-such-docker.sock" in check.detail


def test_clean_without_engine_removes_nothing(no_engine: None) -> None:
    assert dk.DockerBackend.clean() == []


def test_tasks_fail_with_the_hint_when_no_engine_answers(no_engine: None, tmp_path: Path) -> None:
    env = dk.DockerEnvironment(name="box", image="img:1")
    cell = Cell(env, {"model": "mnist_cnn"}, RunSettings(iterations=2, warmup=1, repeats=2, timeout=60, seed=0))
    got: list[tuple[Task, object]] = []
    with dk.DockerBackend(env, RunContext("r1", tmp_path)) as backend:
        backend.run([Task(cell, 0), Task(cell, 1)], lambda t, o: got.append((t, o)))
    assert [t.repeat for t, _ in got] == [0, 1]
    for _, outcome in got:
        assert outcome.status is Status.FAILED  # type: ignore[attr-defined]
        assert "no Docker engine answers" in outcome.reason  # type: ignore[attr-defined]
        assert outcome.extra["backend"] == "docker" and outcome.extra["image"] == "img:1"  # type: ignore[attr-defined]
