"""An image that is not on the engine and cannot be pulled, as a person meets it: `matrix run --image IMAGE` in a
folder that holds a matrix.yaml. The run says which matrix file and store it took, says in one line that the image
cannot be had, stores nothing as if its repeats had been tried, exits 3 and is `incomplete`; once the image is
there the same command measures them (it used to say "nothing to run")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.store import Store
from tests.backends.docker.dockertools import IMAGE, cli, rows, write_matrix

pytestmark = pytest.mark.docker

NGC = "nvcr.io/nvidia/pytorch:18.07-py3"  # no registry is reachable from the test machines

SMALL = """
name: missing-image
environments: [{name: cpu, backend: local}]
axes: {model: [mnist_cnn], precision: [fp32], batch_size: [8, 16], device: [cpu], threads: [1]}
run: {iterations: 2, warmup: 1, repeats: 3, timeout: 300}
"""


def statuses(db: Path) -> list[str]:
    with Store(db, create=False) as store:
        return [r.status for r in store.runs()]


def test_a_missing_image_stores_nothing_is_said_once_and_leaves_the_run_incomplete(
        tmp_path: Path, docker_client: Any, run_label_gone: Any) -> None:
    from docker.errors import NotFound

    try:
        docker_client.images.remove(NGC)
    except NotFound:  # Docker: ImageNotFound; Podman says "image not known", which docker-py calls NotFound
        pass
    write_matrix(tmp_path / "matrix.yaml", SMALL)  # the folder's matrix file, taken without -m
    first = cli("run", "--image", NGC, "--db", "r.db", cwd=tmp_path, check=False)
    said = first.stdout + first.stderr
    assert first.returncode == 3, said
    assert first.stderr.startswith("matrix 'missing-image': matrix.yaml (found in this folder; -m FILE or "
                                   f"MATRIX_FILE picks another), its axes in image {NGC}; store: r.db\n"), said
    assert rows(tmp_path / "r.db", latest_only=False) == []  # nothing was tried, so nothing is stored
    (line,) = [ln for ln in said.splitlines() if "not on this engine" in ln and ln.startswith("not started")]
    assert line.endswith("6 repeats not run, nothing stored (`matrix run` tries them again)"), line
    assert "ended the same way" not in said
    assert "Not started: 6 repeats of" in first.stdout and "the run is incomplete" in first.stdout
    assert statuses(tmp_path / "r.db") == ["incomplete"]
    listed = cli("ls", "--db", "r.db", cwd=tmp_path)
    assert "incomplete" in listed.stdout and " complete " not in listed.stdout
    # "loading" the image, as `docker load` would; repository and tag apart: Podman's API refuses "repo:tag"
    # as the repository (invalid reference format), Docker takes both forms.
    docker_client.images.get(IMAGE).tag(*NGC.rsplit(":", 1))
    try:
        second = cli("run", "--image", NGC, "--db", "r.db", cwd=tmp_path, check=False)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "Nothing to run" not in second.stdout
        assert [r["status"] for r in rows(tmp_path / "r.db")] == ["ok"] * 6
        assert statuses(tmp_path / "r.db") == ["incomplete", "complete"]
    finally:
        docker_client.images.remove(NGC)
    with Store(tmp_path / "r.db", create=False) as store:
        run_ids = [r.run_id for r in store.runs()]
    for run_id in run_ids:
        assert run_label_gone(run_id) == []
