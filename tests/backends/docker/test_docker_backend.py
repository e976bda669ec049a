"""DockerBackend against the real engine, driven directly: isolation, timeouts, probes, clean, doctor."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from runner.backends.base import NotStarted
from runner.backends.context import RunContext
from runner.backends.docker import DockerBackend, DockerEnvironment
from runner.domain.cells import Cell, Mount, RunSettings, Task
from runner.domain.outcomes import Outcome, Status
from tests.backends.docker.dockertools import IMAGE

pytestmark = pytest.mark.docker

SMALL: dict[str, str | int] = {"model": "mnist_cnn", "precision": "fp32", "batch_size": 16, "dataset": "synthetic", "device": "cpu"}
# Lists the processes in the container that carry a matrix task mark (what a timeout must kill).
MARKED = ("import os\nfor p in os.listdir('/proc'):\n    try:\n        e = open('/proc/%s/environ' % p, 'rb').read()\n"
          "    except Exception:\n        continue\n    if b'MATRIX_TASK=' in e:\n        print(p)\n")


def tasks(env: DockerEnvironment, repeats: int = 1, iterations: int = 2, timeout: float = 120,
          **params: Any) -> list[Task]:
    cell = Cell(env, {**SMALL, **params}, RunSettings(iterations=iterations, warmup=1, repeats=repeats,
                                                       timeout=timeout))
    return [Task(cell, r) for r in range(repeats)]


def ctx(tmp_path: Path) -> RunContext:
    return RunContext(run_id=f"test-{uuid.uuid4().hex[:8]}", workdir=tmp_path)


def test_container_is_isolated_read_only_and_labelled(docker_client: Any, run_label_gone: Any,
                                                       tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("keep me")
    env = DockerEnvironment(name="iso", image=IMAGE, env={"OMP_NUM_THREADS": "1", "MATRIX_TEST": "yes"},
                            mounts=[Mount(source=str(data), target="/data")])
    run = ctx(tmp_path)
    seen: list[tuple[Outcome, dict[str, Any], str]] = []

    def sink(task: Task, outcome: Outcome) -> None:
        assert backend.container is not None
        attrs = docker_client.api.inspect_container(backend.container.id)
        write = docker_client.api.exec_create(backend.container.id, ["sh", "-c", "echo x > /data/y"])
        docker_client.api.exec_start(write["Id"])
        seen.append((outcome, attrs, str(docker_client.api.exec_inspect(write["Id"])["ExitCode"])))

    with DockerBackend(env, run) as backend:
        backend.run(tasks(env), sink)
        cid = backend.container.id if backend.container else None
    (outcome, attrs, write_rc), = seen
    assert outcome.status is Status.OK, outcome.reason + outcome.log_tail
    host = attrs["HostConfig"]
    assert host["Privileged"] is False and not host.get("CapAdd")
    assert host["NetworkMode"] == "none"
    assert host["ShmSize"] == 8 * 1024**3
    (mount,) = attrs["Mounts"]
    assert mount["Destination"] == "/data" and mount["RW"] is False
    assert write_rc != "0" and not (data / "y").exists()
    labels = attrs["Config"]["Labels"]
    assert labels["matrix.run_id"] == run.run_id and labels["matrix.environment"] == "iso"
    assert labels["matrix.managed"] == "true"
    assert "MATRIX_TEST=yes" in attrs["Config"]["Env"]
    assert attrs["Config"]["User"] == ""  # the image's user
    assert outcome.extra["container_id"] == cid and outcome.extra["backend"] == "docker"
    assert outcome.extra["image_id"].startswith("sha256:") and outcome.extra["image"] == IMAGE
    assert outcome.env["torch"].startswith("1.13")
    assert run_label_gone(run.run_id) == []


def test_hung_repeat_is_killed_inside_the_container_at_its_timeout(docker_client: Any, run_label_gone: Any,
                                                                   tmp_path: Path) -> None:
    env = DockerEnvironment(name="hang", image=IMAGE, env={"OMP_NUM_THREADS": "1"})
    run = ctx(tmp_path)
    got: list[Outcome] = []
    left: list[str] = []
    with DockerBackend(env, run) as backend:
        t0 = time.time()
        backend.run(tasks(env, iterations=10**7, timeout=5), lambda t, o: got.append(o))
        took = time.time() - t0
        assert backend.container is not None
        probe = docker_client.api.exec_create(backend.container.id, ["python3", "-c", MARKED])
        left = docker_client.api.exec_start(probe["Id"]).decode().split()
        first = backend.container.id
        backend.run(tasks(env, iterations=2, batch_size=8), lambda t, o: got.append(o))
    timed_out, after = got
    assert timed_out.status is Status.TIMEOUT and "timeout of 5 s" in timed_out.reason
    assert took < 5 + 30, f"the timeout fired after {took:.1f} s"
    assert left == [], f"processes of the killed repeat still run in the container: {left}"
    assert after.status is Status.OK and after.extra["container_id"] == first  # the container was reused
    assert run_label_gone(run.run_id) == []


def test_user_option_runs_the_bench_as_that_user(docker_client: Any, tmp_path: Path) -> None:
    env = DockerEnvironment(name="nobody", image=IMAGE, user="65534:65534", env={"OMP_NUM_THREADS": "1"})
    got: list[Outcome] = []
    with DockerBackend(env, ctx(tmp_path)) as backend:
        backend.run(tasks(env), lambda t, o: got.append(o))
        assert backend.container is not None
        assert docker_client.api.inspect_container(backend.container.id)["Config"]["User"] == "65534:65534"
    assert got[0].status is Status.OK, got[0].reason + got[0].log_tail


BROKEN = {
    "nopython": ("rm -f /usr/bin/python3* /usr/bin/python", "no Python found in image"),
    "notorch": ("rm -rf /usr/lib/python3/dist-packages/torch", "has no torch"),
}


@pytest.fixture(params=sorted(BROKEN))
def broken_image(request: pytest.FixtureRequest, docker_client: Any) -> Any:
    """The test image with its python (or its torch) deleted: a container where the bench cannot run."""
    tag = f"matrix/test-{request.param}:{uuid.uuid4().hex[:8]}"
    script, reason = BROKEN[request.param]
    c = docker_client.containers.create(IMAGE, ["sh", "-c", script], network_mode="none")
    try:
        c.start()
        c.wait(timeout=60)
        c.commit(*tag.split(":"))
    finally:
        c.remove(force=True)
    yield tag, reason
    docker_client.images.remove(tag, force=True)


def test_image_without_python_or_torch_does_not_start_with_the_reason(broken_image: tuple[str, str],
                                                                       run_label_gone: Any, tmp_path: Path) -> None:
    image, reason = broken_image
    env = DockerEnvironment(name="broken", image=image)
    run = ctx(tmp_path)
    got: list[Outcome] = []
    with pytest.raises(NotStarted) as refused, DockerBackend(env, run) as backend:
        backend.run(tasks(env, repeats=2), lambda t, o: got.append(o))
    assert got == []  # no repeat was tried: the run stores nothing for them
    assert reason in str(refused.value) and "`python`" in str(refused.value), refused.value
    assert run_label_gone(run.run_id) == []


def test_clean_reaps_containers_of_dead_runs_and_keeps_live_ones(docker_client: Any, run_label_gone: Any) -> None:
    run_id = f"clean-{uuid.uuid4().hex[:8]}"
    import socket
    common = {"matrix.managed": "true", "matrix.run_id": run_id, "matrix.host": socket.gethostname()}
    dead = docker_client.containers.create(IMAGE, ["sleep", "infinity"], network_mode="none",
                                           labels={**common, "matrix.environment": "dead", "matrix.pid": "999999999"})
    live = docker_client.containers.create(IMAGE, ["sleep", "infinity"], network_mode="none",
                                           labels={**common, "matrix.environment": "live",
                                                   "matrix.pid": str(os.getppid())})
    try:
        removed = DockerBackend.clean()
        assert any(dead.short_id in r for r in removed) and not any(live.short_id in r for r in removed)
        names = {c.name for c in docker_client.containers.list(all=True, filters={"label": f"matrix.run_id={run_id}"})}
        assert names == {live.name}
        assert any(live.short_id in r for r in DockerBackend.clean(run_id=run_id))  # asked by run id: removed
    finally:
        run_label_gone(run_id)


def test_doctor_reports_engine_runtime_and_test_image(docker_client: Any, engine_kind: str) -> None:
    checks = {c.name: c for c in DockerBackend.doctor()}
    engine = checks["docker engine"]  # the engine DOCKER_HOST points at, whichever it is
    assert engine.ok is True and docker_client.version()["ApiVersion"] in engine.detail
    assert engine.detail.startswith("Podman " if engine_kind == "podman" else "Docker "), engine.detail
    if engine_kind == "podman":  # GPUs go to Podman as CDI devices: the check looks for a CDI spec
        assert "CDI" in checks["docker GPUs (CDI)"].detail and "podman engine" not in checks
    else:
        runtime = checks["docker GPU runtime"]
        has_nvidia = "nvidia" in (docker_client.info().get("Runtimes") or {})
        assert (runtime.ok is True) == has_nvidia
        if not has_nvidia:
            assert "NVIDIA Container Toolkit" in runtime.detail
        podman = checks["podman engine"]  # Podman's API beside Docker, for `engine: podman` environments
        assert podman.ok is True and podman.detail.startswith("Podman "), podman.detail
    assert checks["docker test image"].ok is True and IMAGE in checks["docker test image"].detail


def test_an_environment_gets_the_engine_it_names_or_does_not_start(docker_client: Any, engine_kind: str,
                                                                  run_label_gone: Any, tmp_path: Path) -> None:
    """`engine:` picks Podman's API whatever DOCKER_HOST says, and an engine that is not the one named is a
    reason, not a silent substitute; each result says which engine ran it."""
    other = "docker" if engine_kind == "podman" else "podman"
    mine = DockerEnvironment(name="mine", image=IMAGE, engine=engine_kind, env={"OMP_NUM_THREADS": "1"})
    got: list[Outcome] = []
    run = ctx(tmp_path)
    with DockerBackend(mine, run) as backend:
        backend.run(tasks(mine, iterations=1), lambda t, o: got.append(o))
    assert got[0].status is Status.OK, got[0].reason
    assert got[0].extra["container_runtime"] == engine_kind and got[0].extra["container_runtime_version"][0].isdigit()
    if engine_kind == "podman":  # DOCKER_HOST is Podman's socket here: an environment that asks for Docker
        # An environment that cannot start stores nothing as tried: the backend says why once, and no repeat ran.
        wrong = DockerEnvironment(name="wrong", image=IMAGE, engine=other)
        with pytest.raises(NotStarted, match=r"is Podman 4.*not docker.*unset DOCKER_HOST"):
            with DockerBackend(wrong, ctx(tmp_path)) as backend:
                backend.run(tasks(wrong), lambda t, o: got.append(o))
        assert len(got) == 1
    assert run_label_gone(run.run_id) == []
