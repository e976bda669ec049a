"""The MLPerf-logging test script as a workload in the Docker test image and as a two-node Slurm job: the
real mlperf-logging package shipped as a workload folder (neither the image nor Debian's python3 has it),
an argv value with spaces and shell metacharacters reaching every rank verbatim, the environment captured
where the program ran."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.backends.workloads.conftest import SCRIPTS, WEIRD, cli, received_argv, rows
from tests.conftest import require

IMAGE = "matrix/debian-torch:1.13"
BARE_PYTHON = "/usr/bin/python3"  # Debian's python3-torch on the Slurm nodes (scripts/slurm-up.sh)

MATRIX = """
name: wl-{kind}
environments:
  - {environment}
workload:
  argv: ["{{python}}", "{{files}}/mlperf_train.py", "--batch-size", "{{batch_size}}", "--epochs", "3", "--steps", "5",
         "--label", "{{label}}"]
  files: ["{script}", "{package}"]
  parser: mllog
axes:
  batch_size: [16]
  label: [{label}]
{layout}
run: {{repeats: 1, timeout: 240}}
"""


def write(tmp_path: Path, kind: str, environment: str, package: Path, layout: str = "") -> None:
    (tmp_path / "m.yaml").write_text(MATRIX.format(kind=kind, environment=environment, script=SCRIPTS / "mlperf_train.py",
                                                   package=package, label=json.dumps(WEIRD), layout=layout))


def check_result(row: dict[str, object], world: int) -> None:
    assert row["status"] == "ok", f"{row['reason']}\n{row['log_tail']}"
    metrics = row["metrics"]
    assert isinstance(metrics, dict) and metrics["throughput"] > 0 and metrics["images"] == 3 * 5 * 16 * world
    raw = row["raw"]
    assert isinstance(raw, dict) and raw["workload"]["found"]["logged"] == {"global_batch_size": 16 * world}
    argv = received_argv(str(row["log_tail"]))
    assert argv[argv.index("--label") + 1] == WEIRD


@pytest.mark.docker
def test_mllog_workload_in_the_docker_test_image(tmp_path: Path, mllog_package: Path) -> None:
    try:
        import docker

        client = docker.from_env()
        client.images.get(IMAGE)
    except Exception as e:  # noqa: BLE001 - any failure means: no engine or no image here
        require(False, f"no Docker engine with {IMAGE} ({e}); `make services` builds it")
    write(tmp_path, "docker", f"{{name: container, backend: docker, image: {IMAGE}, env: {{OMP_NUM_THREADS: '1'}}}}",
          mllog_package)
    run = cli("run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (row,) = rows(tmp_path / "r.db")
    check_result(row, 1)
    env = row["env"]
    assert env["container"] == "docker" and env["image"] == IMAGE and env["torch"].startswith("1.13")
    assert env["launcher_python"] == "/usr/bin/python3"


CACHING = """
import os, stat
here = os.path.dirname(os.path.abspath(__file__))
warm = os.path.exists(os.path.join(here, "cache.bin"))
open(os.path.join(here, "cache.bin"), "w").write("x")
print("speed %d img/s" % (200 if warm else 100))
print("mode %o" % stat.S_IMODE(os.stat(os.path.join(here, "secret.cfg")).st_mode))
"""


def job_nodes(job_id: str, wait: float = 30.0) -> int:
    """The nodes Slurm's accounting gave the job (its array task), waiting for the record to arrive: a result
    read before sacct has the row carries no slurm_nodes, so ask sacct itself."""
    deadline = time.monotonic() + wait
    while True:
        out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "NNodes"], capture_output=True,
                             text=True, timeout=30).stdout.split()
        if out or time.monotonic() > deadline:
            return max((int(n) for n in out if n.isdigit()), default=0)
        time.sleep(1)


@pytest.mark.slurm
def test_mllog_workload_on_two_slurm_nodes(tmp_path: Path, mllog_package: Path) -> None:
    ok = shutil.which("sbatch") is not None and subprocess.run(
        ["sinfo", "-h", "-p", "multi", "-o", "%t"], capture_output=True, text=True, timeout=30).stdout.strip() != ""
    require(ok, "no Slurm with the `multi` partition (scripts/slurm-up.sh, make services)")
    write(tmp_path, "slurm", "{name: cluster, backend: slurm, partition: multi, python: " + BARE_PYTHON +
          ", gpus_per_node: 0, poll_interval: 1, time: '4', env: {OMP_NUM_THREADS: '1'}}", mllog_package,
          layout="  nodes: [2]")
    run = cli("run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (row,) = rows(tmp_path / "r.db")
    check_result(row, 2)
    assert "rank 1 of 2" in str(row["log_tail"])  # the other node's rank ran the program too
    assert row["env"]["slurm_job_id"] and row["env"]["launcher_python"] == BARE_PYTHON
    assert job_nodes(str(row["env"]["slurm_job_id"])) == 2  # as Slurm's accounting saw the job

    staged = list((tmp_path / "w" / "slurm").glob("*/files-*/mlperf_logging/mllog/mllog.py"))
    assert staged, "the package was placed beside the zipapp in the results directory"


@pytest.mark.docker
@pytest.mark.parametrize("user", ["", "1000:1000"])
def test_files_in_a_container_keep_their_mode_and_never_run_warm(tmp_path: Path, user: str) -> None:
    """A 0600 file stays 0600 where the program reads it, and a program caching beside itself runs cold in
    every repeat (each repeat has its own copy of the files). The placed master is 0400, owned by the user the
    launcher runs as (the image's, or `user:`), who can read it."""
    try:
        import docker

        docker.from_env().images.get(IMAGE)
    except Exception as e:  # noqa: BLE001 - any failure means: no engine or no image here
        require(False, f"no Docker engine with {IMAGE} ({e}); `make services` builds it")
    (tmp_path / "train.py").write_text(CACHING)  # as tests/backends/workloads/test_staged_files.py
    (tmp_path / "secret.cfg").write_text("token\n")
    (tmp_path / "secret.cfg").chmod(0o600)
    (tmp_path / "m.yaml").write_text(f"""
name: wl-files
environments: [{{name: container, backend: docker, image: {IMAGE}{f", user: '{user}'" if user else ""}}}]
workload:
  argv: ["{{python}}", "{{files}}/train.py"]
  files: [train.py, secret.cfg]
  parser: {{kind: pattern, figures: {{throughput: {{regex: 'speed ([0-9]+)', unit: img/s}}}}}}
axes: {{batch_size: [1]}}
run: {{repeats: 2, timeout: 120}}
""")
    run = cli("run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = rows(tmp_path / "r.db")
    assert [r["metrics"]["throughput"] for r in got] == [100.0, 100.0]
    assert all("mode 600" in str(r["log_tail"]) for r in got)
