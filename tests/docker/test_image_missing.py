"""An image that is not on the engine and cannot be pulled: nothing is measured, so nothing is stored as a
measurement. The repeats are `not_started`, `matrix run` exits non-zero, and once the image is there the
same command measures them (it used to say "nothing to run")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dockertools import IMAGE, cli, rows, write_matrix

pytestmark = pytest.mark.docker

NGC = "nvcr.io/nvidia/pytorch:18.07-py3"  # no registry is reachable from the test machines

SMALL = """
name: missing-image
environments: [{name: cpu, backend: local}]
axes: {model: [mnist_cnn], precision: [fp32], batch_size: [8], device: [cpu], threads: [1]}
run: {iterations: 2, warmup: 1, repeats: 2, timeout: 300}
"""


def test_a_missing_image_is_not_started_exits_3_and_runs_once_it_is_loaded(
        tmp_path: Path, docker_client: Any, run_label_gone: Any) -> None:
    from docker.errors import NotFound

    try:
        docker_client.images.remove(NGC)
    except NotFound:  # Docker: ImageNotFound; Podman says "image not known", which docker-py calls NotFound
        pass
    m = write_matrix(tmp_path / "m.yaml", SMALL)
    first = cli("run", "-m", str(m), "--image", NGC, "--db", "r.db", cwd=tmp_path, check=False)
    assert first.returncode == 3, first.stdout + first.stderr
    assert {r["status"] for r in rows(tmp_path / "r.db")} == {"not_started"}
    said = first.stdout + first.stderr
    assert said.count("not on this engine") == 1, said  # said once, then counted
    assert "Not measured: 2 not_started" in first.stdout
    # "loading" the image, as `docker load` would; repository and tag apart: Podman's API refuses "repo:tag"
    # as the repository (invalid reference format), Docker takes both forms.
    docker_client.images.get(IMAGE).tag(*NGC.rsplit(":", 1))
    try:
        second = cli("run", "-m", str(m), "--image", NGC, "--db", "r.db", cwd=tmp_path, check=False)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "Nothing to run" not in second.stdout
        assert [r["status"] for r in rows(tmp_path / "r.db")] == ["ok", "ok"]
        assert len(rows(tmp_path / "r.db", latest_only=False)) == 4, "the not_started rows stay in the history"
    finally:
        docker_client.images.remove(NGC)
    for run_id in {r["run_id"] for r in rows(tmp_path / "r.db", latest_only=False)}:
        assert run_label_gone(run_id) == []
