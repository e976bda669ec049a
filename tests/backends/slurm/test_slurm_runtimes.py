"""Podman and Charliecloud for real under the real Slurm, on the namespaced `multi` partition.

One `matrix run` (kept to one, real container runs are slow on two cores) with four environments:
a two-node DDP cell inside Podman and one inside Charliecloud, both from the project's Debian test image
(scripts/podman-up.sh loads it, scripts/charliecloud-up.sh converts it), a Podman image that is not
there and a Charliecloud whose ch-run is not there. The last two must be `not_started` with their
reasons and no rank started; the first two must say which runtime, version and image ran them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.backends.containers.image_hash import image_identity
from runner.store import Store
from tests.backends.slurm.test_slurm_cli import cli
from tests.backends.slurm.test_slurm_multinode import LOCK, LOCK_WAIT_S, exclusive, wait_nodes_up
from tests.conftest import require

pytestmark = pytest.mark.slurm

IMAGE = "matrix/debian-torch:1.13"
CH_IMAGE = Path("/var/cache/matrix/charliecloud/debian-torch-1.13")

MATRIX = f"""
name: runtimes
environments:
  - {{name: podman-ddp, backend: slurm, partition: multi, gpus_per_node: 0, poll_interval: 1,
     env: {{OMP_NUM_THREADS: "1"}}, container: {{runtime: podman, image: "{IMAGE}"}}}}
  - {{name: charliecloud-ddp, backend: slurm, partition: multi, gpus_per_node: 0, poll_interval: 1,
     env: {{OMP_NUM_THREADS: "1"}}, container: {{runtime: charliecloud, image: "{CH_IMAGE}"}}}}
  - {{name: podman-ghost, backend: slurm, partition: multi, gpus_per_node: 0, poll_interval: 1,
     container: {{runtime: podman, image: "matrix/no-such-image:0.0"}}}}
  - {{name: charliecloud-missing, backend: slurm, partition: multi, gpus_per_node: 0, poll_interval: 1,
     container: {{runtime: charliecloud, image: "{CH_IMAGE}", executable: /opt/no-charliecloud/bin/ch-run}}}}
axes: {{model: [mnist_cnn], precision: [fp32], batch_size: [16], device: [cpu], threads: [1], nodes: [2]}}
run: {{iterations: 5, warmup: 1, repeats: 1, timeout: 300}}
"""


def _ok(args: list[str]) -> bool:
    try:
        return subprocess.run(args, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def runtimes(slurm: None) -> None:
    """Podman with the test image and Charliecloud with its converted copy; else skip (fail in CI)."""
    require(shutil.which("podman") is not None and _ok(["podman", "image", "exists", IMAGE]),
            f"podman or its {IMAGE} is missing: run scripts/podman-up.sh (make services)")
    require(shutil.which("ch-run") is not None and (CH_IMAGE / "ch" / "environment").exists(),
            f"ch-run or the image directory {CH_IMAGE} is missing: run scripts/charliecloud-up.sh (make services)")


@pytest.fixture(scope="module")
def stored(runtimes: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """The one run, on the multi partition while no fault test holds it; its rows by environment."""
    root = tmp_path_factory.mktemp("runtimes")
    (root / "m.yaml").write_text(MATRIX)
    with exclusive(LOCK, LOCK_WAIT_S):
        try:
            wait_nodes_up(within=60)
        except AssertionError as e:
            require(False, str(e))
        out = cli("run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w", cwd=root, check=False)
    assert out.returncode == 3, out.stdout + out.stderr  # two environments could not start
    with Store(root / "r.db", create=False) as store:
        rows = {r.environment: r.columns() for r in store.rows()}
    yield {**rows, "_root": {"path": root, "out": out.stdout + out.stderr}}


@pytest.mark.parametrize("name,runtime", [("podman-ddp", "podman"), ("charliecloud-ddp", "charliecloud")])
def test_a_two_node_ddp_cell_runs_inside_the_container(stored: dict[str, dict[str, Any]], name: str,
                                                       runtime: str) -> None:
    row = stored[name]
    assert row["status"] == "ok", (row["reason"], row["log_tail"])
    env, metrics = row["env"], row["metrics"]
    assert metrics["world_size"] == 2 and metrics["throughput"] > 0
    hosts = env["hostnames"]  # one rank on each of two nodes, each its own host (not a container id)
    assert len(set(hosts)) == 2 and all(h.startswith("node") for h in hosts), hosts
    assert env["torch"].startswith("1.13")  # the image's PyTorch, not the controller's 2.13
    assert env["container"] == runtime and env["container_runtime"] == runtime
    assert env["container_nodes"] == env["hostnames"]
    assert "container_nodes_differ" not in env


def test_podman_results_carry_the_image_id_podman_reports(stored: dict[str, dict[str, Any]]) -> None:
    env = stored["podman-ddp"]["env"]
    inspected = json.loads(subprocess.run(["podman", "image", "inspect", IMAGE], capture_output=True, text=True,
                                          check=True).stdout)[0]
    assert env["image_id"] == f"sha256:{inspected['Id']}" and env["image"] == IMAGE
    assert env["repo_digest"] == inspected["Digest"]
    assert env["container_runtime_version"].startswith("4.")  # as `podman --version` said: podman version 4.3.1


def test_charliecloud_results_carry_the_image_tree_hash(stored: dict[str, dict[str, Any]]) -> None:
    env = stored["charliecloud-ddp"]["env"]
    assert env["image_id"] == f"sha256:{image_identity(str(CH_IMAGE)).sha256}"
    assert env["image_id_of"] == "directory tree" and env["image"] == str(CH_IMAGE)
    assert env["container_runtime_version"] == "0.31"


@pytest.mark.parametrize("name,words", [
    ("podman-ghost", "image matrix/no-such-image:0.0 is not in podman's image storage"),
    ("charliecloud-missing", "ch-run (/opt/no-charliecloud/bin/ch-run) is not on PATH"),
])
def test_a_missing_image_or_runtime_is_not_started_with_the_reason(stored: dict[str, dict[str, Any]], name: str,
                                                                   words: str) -> None:
    row = stored[name]
    assert row["status"] == "not_started", (row["status"], row["reason"], row["log_tail"])
    assert row["reason"].startswith("the container runtime cannot start on node") and words in row["reason"]
    assert row["metrics"] in ({}, None) and "Traceback" not in stored["_root"]["out"]
    work = Path(row["env"]["slurm_results_dir"]) / "work"
    task = f"{row['cell_key']}-r{row['repeat']}"
    assert list(work.glob(f"{task}.check.*")) and not list(work.glob(f"{task}.rank*")), \
        "the check ran, and no rank started after it failed"
