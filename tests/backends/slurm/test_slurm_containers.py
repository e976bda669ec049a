"""Container runtimes under Slurm, without Slurm or the runtimes: the rendered scripts against golden files,
and each script run by bash with stand-ins for srun and the runtime (the one narrow fake), so that the
words a rank's srun receives are checked against the runtime's documented command line:

- Apptainer 1.3 user guide: `apptainer exec [--nv] [--bind SRC:DST[:ro]]... [--pwd DIR] IMAGE CMD...`;
- pyxis 0.17 README / `srun --help`: `srun --container-image=IMAGE --container-mounts=SRC:DST[:ro],...
  --container-workdir=DIR CMD...`;
- podman-run(1) of Podman 4.3: `podman run [--volume SRC:DST[:ro]] [--env NAME] [--device CDI] IMAGE CMD...`;
- ch-run(1) of Charliecloud 0.31: `ch-run [--bind SRC:DST]... [--cd DIR] [--set-env] IMAGE -- CMD...`.

Podman and Charliecloud also run for real (tests/backends/slurm/test_slurm_runtimes.py); Apptainer and pyxis do not.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from runner.backends import containers
from runner.backends.containers import ContainerSpec, facts, image_hash
from runner.backends.slurm import SlurmEnvironment, task_outcomes
from runner.backends.slurm.script import array_job, render_script, time_seconds
from runner.backends.slurm.state import Watched
from runner.base.errors import ConfigError
from runner.domain.cells import Cell, RunSettings, Task
from runner.domain.outcomes import Status
from runner.matrix import parse

GOLDEN = Path(__file__).with_name("golden")
RESULTS = "/shared/matrix runs/r1"  # a space: every path must travel as one word
ARGS = ["--iterations", "5", "--warmup", "1", "--model", "mnist_cnn", "--batch-size", "16"]
IMAGES = {
    "apptainer": "/shared/images/pytorch 24.10.sif",
    "pyxis": "nvcr.io#nvidia/pytorch:24.10-py3",
    "podman": "nvcr.io/nvidia/pytorch:24.10-py3",
    "charliecloud": "/shared/images/pytorch-24.10",
}
OPTIONS = {"apptainer": ["--cleanenv"], "pyxis": ["--no-container-mount-home"], "podman": ["--shm-size=8g"],
           "charliecloud": ["--private-tmp"]}


def env_for(runtime: str, gpus_per_node: int = 1, **container: Any) -> SlurmEnvironment:
    return SlurmEnvironment.model_validate({
        "name": f"{runtime}-env", "partition": "gpu", "gpus_per_node": gpus_per_node,
        "env": {"NCCL_DEBUG": "WARN"},
        "mounts": [{"source": "/shared/data", "target": "/mnt/1" if runtime == "charliecloud" else "/data",
                    "read_only": runtime != "charliecloud"}],
        "container": {"runtime": runtime, "image": IMAGES[runtime], "options": OPTIONS[runtime], **container}})


def render(env: SlurmEnvironment, results: str = RESULTS, nodes: int = 2) -> str:
    ident = containers.ImageIdentity(sha256="ab" * 32, what="file", stat="123 456")
    runtime = containers.runtime(env.container) if env.container else None
    return render_script(array_job(env, count=3, gpus=4, nodes=nodes, time="00:30:00", run_id="r1",
                                   results_dir=Path(results), manifest="manifest-001.tsv",
                                   bench_name="bench-0123456789ab.pyz", identity=ident if runtime and runtime.image_file() else None))


@pytest.mark.parametrize("runtime", containers.RUNTIME_NAMES)
def test_rendered_script_matches_golden(runtime: str) -> None:
    """Each runtime's script for a 2-node, 4-GPU-per-node job, reviewed once by a person."""
    text = render(env_for(runtime))
    golden = GOLDEN / f"{runtime}.sh"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{runtime}'s script changed: review, then UPDATE_GOLDEN=1 pytest"
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0


def test_runtime_names_are_one_list() -> None:
    assert tuple(containers.RUNTIMES) == containers.RUNTIME_NAMES
    with pytest.raises(ValidationError, match="'singularity' is not allowed|Input should be"):
        ContainerSpec.model_validate({"runtime": "singularity", "image": "x.sif"})


# -- the script, run by bash with srun and the runtime replaced ------------------------------------------

FAKE_SRUN = r'''#!/bin/bash
# srun: --help says what pyxis adds; the check step runs here (node 0); a rank step is recorded, not run.
if [ "$1" = --help ]; then echo "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH"; exit 0; fi
for a in "$@"; do
    if [ "$a" = matrix-check ]; then
        while [ "$1" != bash ]; do shift; done
        SLURM_NODEID=0 exec "$@"
    fi
done
printf '%s\0' "$@" > "$RECORD"
'''
FAKE_RUNTIME = r'''#!/bin/bash
# A container runtime that says its version, knows one image, and starts nothing.
case "$*" in
    --version|version) echo "fake-runtime version 9.9" ;;
    *"image inspect"*) [ -n "$MISSING_IMAGE" ] && { echo "Error: $IMAGE_ARG: image not known" >&2; exit 125; }
                       echo "0123abcd sha256:feed" ;;
    *) exit 0 ;;
esac
'''


def run_script(tmp_path: Path, text: str, results: Path, extra_env: dict[str, str] | None = None,
               task_id: str = "task-r0") -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """bash the script with fake srun/scontrol/runtime on PATH; what the rank step's srun received."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in (("srun", FAKE_SRUN), ("scontrol", "#!/bin/sh\necho node1\n")):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    for exe in ("apptainer", "podman", "ch-run", "enroot"):
        (bindir / exe).write_text(FAKE_RUNTIME)
        (bindir / exe).chmod(0o755)
    (results / "manifest-001.tsv").write_text("\t".join([task_id, *ARGS]) + "\n")
    record = tmp_path / "srun.argv"
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "RECORD": str(record), "SLURM_ARRAY_TASK_ID": "0",
           "SLURM_ARRAY_JOB_ID": "7", "SLURM_JOB_ID": "8", "SLURM_JOB_NODELIST": "node[1-2]",
           "SLURM_JOB_NUM_NODES": "2", **(extra_env or {})}
    proc = subprocess.run(["bash", "-c", text], cwd=results, env=env, capture_output=True, text=True, timeout=60)
    argv = record.read_bytes().decode().split("\0")[:-1] if record.exists() else []
    return argv, proc


def rank_words(argv: list[str]) -> tuple[list[str], list[str]]:
    """(srun's own options, the words the rank wrapper runs) of the recorded rank step."""
    bash = argv.index("bash")
    return argv[:bash], argv[argv.index("matrix-rank") + 1:]


def make_image(path: Path, directory: bool = True, libcuda: bool = True) -> None:
    """A stand-in image: a file, or a directory with what ch-run needs (/ch/environment, /mnt/0-9, and
    the driver's libcuda that `ch-fromhost --nvidia` injects)."""
    if not directory:
        path.write_bytes(b"SIF")
        return
    (path / "ch").mkdir(parents=True)
    (path / "ch" / "environment").write_text("PATH=/usr/bin:/bin\n")
    for i in range(10):
        (path / "mnt" / str(i)).mkdir(parents=True)
    if libcuda:
        (path / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
        (path / "usr" / "lib" / "x86_64-linux-gnu" / "libcuda.so.1").write_bytes(b"")


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    d = tmp_path / "matrix runs" / "r1"
    d.mkdir(parents=True)
    return d


EXPECTED: dict[str, Any] = {
    # apptainer exec --nv --bind SRC:DST[:ro] ... --pwd DIR IMAGE CMD (the host environment passes through)
    "apptainer": lambda r, img: ["apptainer", "exec", "--nv", "--bind", f"{r}:{r}:ro", "--bind",
                                 "/shared/data:/data:ro", "--pwd", r, "--cleanenv", img],
    # srun starts the container: no words before python
    "pyxis": lambda r, img: [],
    "podman": lambda r, img: ["podman", "run", "--rm", "--pull=never", "--network=host", "--uts=host", "--ipc=host",
                              "--label=matrix.run_id=r1", "--timeout=1920", f"--volume={r}:{r}:ro",
                              "--volume=/shared/data:/data:ro", f"--workdir={r}", "--env=RANK",
                              "--env=LOCAL_RANK", "--env=LOCAL_WORLD_SIZE", "--env=WORLD_SIZE", "--env=MASTER_ADDR",
                              "--env=MASTER_PORT", "--env=PYTHONUNBUFFERED", "--env=MATRIX_TASK",
                              "--env=CUDA_VISIBLE_DEVICES", "--env=SLURM_*", "--env=NCCL_*", "--env=GLOO_*",
                              "--env=NCCL_DEBUG", "--device=nvidia.com/gpu=all", "--shm-size=8g", img],
    # ch-run binds only onto directories that exist in the image (/mnt/0-9), read-write
    "charliecloud": lambda r, img: ["ch-run", "--bind", f"{r}:/mnt/0", "--bind", "/shared/data:/mnt/1",
                                    "--cd", "/mnt/0", "--set-env", "--private-tmp", img, "--"],
}


@pytest.mark.parametrize("runtime", containers.RUNTIME_NAMES)
def test_a_rank_starts_with_the_runtimes_documented_command_line(runtime: str, tmp_path: Path,
                                                                  results_dir: Path) -> None:
    image = IMAGES[runtime]
    if runtime in ("apptainer", "charliecloud"):  # a file or directory image must exist on the node
        image = str(tmp_path / Path(image).name)
        make_image(Path(image), directory=runtime == "charliecloud")
    env = env_for(runtime, image=image)
    argv, proc = run_script(tmp_path, render(env, str(results_dir)), results_dir)
    assert proc.returncode == 0 and argv, proc.stderr
    srun_options, words = rank_words(argv)
    r = str(results_dir)
    bench = "/mnt/0/bench-0123456789ab.pyz" if runtime == "charliecloud" else f"{r}/bench-0123456789ab.pyz"
    assert words == [*EXPECTED[runtime](r, image), "python3", bench, *ARGS]
    if runtime == "pyxis":
        assert srun_options[-4:] == [f"--container-image={image}",
                                     f"--container-mounts={r}:{r},/shared/data:/data:ro",
                                     f"--container-workdir={r}", "--no-container-mount-home"]
    else:
        assert not any(o.startswith("--container") for o in srun_options)
    nodes = facts.read(results_dir / "out" / "task-r0.runtime")
    assert nodes and nodes[0]["runtime_version"] == "fake-runtime version 9.9" and "error" not in nodes[0]


def test_charliecloud_on_gpus_needs_the_drivers_libraries_in_the_image(tmp_path: Path, results_dir: Path) -> None:
    image = tmp_path / "img"
    make_image(image, libcuda=False)
    argv, _ = run_script(tmp_path, render(env_for("charliecloud", image=str(image)), str(results_dir)), results_dir)
    (node,) = facts.read(results_dir / "out" / "task-r0.runtime")
    assert argv == [] and "run ch-fromhost --nvidia" in node["error"]


def test_podman_facts_are_the_image_id_and_digest(tmp_path: Path, results_dir: Path) -> None:
    env = env_for("podman", gpus_per_node=0)
    run_script(tmp_path, render(env, str(results_dir)), results_dir)
    (node,) = facts.read(results_dir / "out" / "task-r0.runtime")
    got = facts.extra(containers.runtime(env.container), [node])  # type: ignore[arg-type]
    assert got["image_id"] == "sha256:0123abcd" and got["repo_digest"] == "sha256:feed"
    assert got["container_runtime"] == "podman" and got["image"] == IMAGES["podman"]
    assert got["container_runtime_version"] == "9.9"  # from "fake-runtime version 9.9"


@pytest.mark.parametrize("case", ["no runtime", "no image"])
def test_a_missing_runtime_or_image_is_not_started_with_the_reason(case: str, tmp_path: Path,
                                                                   results_dir: Path) -> None:
    env = env_for("podman", gpus_per_node=0, **({"executable": "/opt/none/podman"} if case == "no runtime" else {}))
    task = Task(Cell(env, {"model": "mnist_cnn"}, RunSettings()), 0)
    argv, proc = run_script(tmp_path, render(env, str(results_dir)), results_dir,
                            extra_env={"MISSING_IMAGE": "1"} if case == "no image" else None, task_id=task.id)
    assert argv == [], "no rank may start when the check failed"
    assert proc.returncode != 0
    done = json.loads((results_dir / "out" / f"{task.id}.done").read_text())
    assert done["check_returncode"] != 0
    w = Watched(task, "k", "8", 0, results_dir, time.time(), "r1")
    outcome = task_outcomes.from_files(w, None, {"backend": "slurm"})
    assert outcome.status is Status.NOT_STARTED
    want = "Podman (/opt/none/podman) is not on PATH" if case == "no runtime" else "is not in podman's image storage"
    assert want in outcome.reason and outcome.reason.startswith("the container runtime cannot start on "), outcome.reason


# -- validation --------------------------------------------------------------------------------------------

def test_a_plain_container_string_is_a_pyxis_image() -> None:
    env = SlurmEnvironment.model_validate({"name": "c", "container": "nvcr.io#nvidia/pytorch:24.10-py3"})
    assert env.container is not None and env.container.runtime == "pyxis"
    assert env.container.image == "nvcr.io#nvidia/pytorch:24.10-py3"


@pytest.mark.parametrize("container,mounts,message", [
    ({"runtime": "docker", "image": "x"}, [], "container.runtime (line 1): 'docker' is not allowed; allowed: "
                                             "'apptainer', 'pyxis', 'podman' or 'charliecloud'"),
    ({"runtime": "podman", "image": "x", "bogus": 1}, [], "unknown key 'bogus'; allowed: runtime, image, "
                                                          "executable, options"),
    ({"runtime": "podman", "image": "x", "options": ["--privileged"]}, [], "no privileged containers"),
    ({"runtime": "podman", "image": "x", "options": ["rm -rf /"]}, [], "not a runtime option"),
    ({"runtime": "podman", "image": "x", "options": ["--cap-add=ALL"]}, [], "no privileged containers"),
    ({"runtime": "apptainer", "image": "x.sif", "options": ["--add-caps=CAP_SYS_ADMIN"]}, [], "no privileged"),
    ({"runtime": "podman", "image": "--privileged"}, [], "starts with '-'"),
    ({"runtime": "pyxis", "image": "x", "executable": "/bin/enroot"}, [], "no executable of its own"),
    ({"runtime": "podman", "image": "x\n#SBATCH --uid=0"}, [], "one line"),
    ({"runtime": "charliecloud", "image": "/i"}, [{"source": "/d", "target": "/mnt/1"}],
     "Charliecloud 0.31 binds read-write only"),
    ({"runtime": "apptainer", "image": "/i.sif"}, [{"source": "/a:b", "target": "/d"}],
     "apptainer cannot bind the path '/a:b'"),
])
def test_bad_container_settings_are_one_line_naming_the_field(container: dict[str, Any], mounts: list[Any],
                                                              message: str) -> None:
    text = json.dumps({"environments": [{"name": "c", "backend": "slurm", "container": container,
                                         "mounts": mounts}]})
    with pytest.raises(ConfigError) as err:
        parse(text, Path("m.yaml"))
    assert message in str(err.value) and str(err.value).startswith("m.yaml: environments[0]"), str(err.value)


def test_a_results_directory_a_runtime_cannot_bind_is_not_started(tmp_path: Path) -> None:
    from runner.backends.base import NotStarted
    from runner.backends.context import RunContext
    from runner.backends.slurm import SlurmBackend

    env = SlurmEnvironment.model_validate({"name": "c", "container": {"runtime": "podman", "image": "x"}})
    backend = SlurmBackend(env, RunContext(run_id="r1", workdir=tmp_path / "a:b"))
    with pytest.raises(NotStarted, match="podman cannot bind the path .*a:b"):
        backend.__enter__()


def test_bare_metal_script_is_unchanged_by_containers() -> None:
    env = SlurmEnvironment(name="metal", gpus_per_node=0)
    text = render(env)
    assert "MATRIX_CHECK" not in text and '"$PYTHON" "$RESULTS/$BENCH_NAME" "${args[@]}"' in text


@pytest.mark.parametrize("limit,seconds", [("5", 300), ("01:30", 90), ("1:00:00", 3600), ("2-00", 172800),
                                           ("1-01:02:03", 90123), ("UNLIMITED", None)])
def test_time_limit_in_seconds(limit: str, seconds: int | None) -> None:
    assert time_seconds(limit) == seconds


# -- image identity ------------------------------------------------------------------------------------------

def test_a_file_image_is_hashed_once_and_again_when_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image, cache = tmp_path / "img.sif", tmp_path / "ids.json"
    image.write_bytes(b"sif" * 1000)
    calls: list[Path] = []
    real = image_hash.file_hash
    monkeypatch.setattr(image_hash, "file_hash", lambda p: calls.append(p) or real(p))
    first = image_hash.image_identity(str(image), cache)
    assert first.sha256 == hashlib.sha256(b"sif" * 1000).hexdigest() and first.what == "file"
    assert image_hash.image_identity(str(image), cache) == first and len(calls) == 1  # from the cache
    image.write_bytes(b"SIF" * 1000)
    os.utime(image, (time.time() + 5, time.time() + 5))
    assert image_hash.image_identity(str(image), cache).sha256 == hashlib.sha256(b"SIF" * 1000).hexdigest()
    assert image_hash.image_identity(str(tmp_path / "gone.sif"), cache).problem.startswith("not visible")  # type: ignore[union-attr]


def test_a_directory_image_hash_follows_its_content(tmp_path: Path) -> None:
    root = tmp_path / "img"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "python3").write_text("one")
    (root / "lib").symlink_to("usr/lib")
    a = image_hash.image_identity(str(root), tmp_path / "ids.json")
    b = image_hash.image_identity(str(root), None)
    assert a.sha256 == b.sha256 and a.what == "directory tree"
    (root / "usr" / "bin" / "python3").write_text("two")
    os.utime(root / "usr" / "bin" / "python3", (time.time() + 5, time.time() + 5))
    assert image_hash.image_identity(str(root), tmp_path / "ids.json").sha256 != a.sha256
    (tmp_path / "ids.json").write_text("{not json")  # a damaged cache is ignored, not an error
    assert image_hash.image_identity(str(root), tmp_path / "ids.json").sha256


def test_a_changed_image_on_the_node_is_recorded_not_hashed(tmp_path: Path, results_dir: Path) -> None:
    image = tmp_path / "img"
    make_image(image)
    env = env_for("charliecloud", gpus_per_node=0, image=str(image))
    text = render(env, str(results_dir))  # the identity says size 123, time 456: not this directory's
    run_script(tmp_path, text, results_dir)
    (node,) = facts.read(results_dir / "out" / "task-r0.runtime")
    got = facts.extra(containers.runtime(env.container), [node])  # type: ignore[arg-type]
    assert "image_id" not in got and "not 123 456" in got["image_changed"]


def test_facts_of_nodes_that_disagree_are_all_kept() -> None:
    spec = ContainerSpec(runtime="podman", image="img")
    nodes = [{"node": "node1", "runtime_version": "podman version 4.3.1", "image_id": "aa"},
             {"node": "node2", "runtime_version": "podman version 4.3.1", "image_id": "bb"}]
    got = facts.extra(containers.runtime(spec), nodes)
    assert got["image_id"] == "sha256:aa" and got["container_nodes"] == ["node1", "node2"]
    assert got["container_nodes_differ"] == {"node1": {"runtime_version": "podman version 4.3.1", "image_id": "aa"},
                                             "node2": {"runtime_version": "podman version 4.3.1", "image_id": "bb"}}
    assert facts.errors([{"node": "n1", "error": "gone"}, {"node": "n2", "error": "gone"}]) == ["n1, n2: gone"]


EVIL = "$(touch /tmp/pwned) `touch /tmp/pwned` 'q' \"d\" ;touch /tmp/pwned #c \\ %j"


@pytest.mark.parametrize("runtime", ["podman", "charliecloud", "apptainer"])
def test_hostile_image_and_options_reach_the_runtime_as_single_words(runtime: str, tmp_path: Path,
                                                                      results_dir: Path) -> None:
    image = str(tmp_path / f"img {EVIL}".replace("/", "_")) if runtime != "podman" else f"img {EVIL}"
    if runtime != "podman":
        make_image(Path(image), directory=runtime == "charliecloud")
    env = SlurmEnvironment.model_validate({
        "name": f"e {EVIL}", "gpus_per_node": 0, "env": {"HOSTILE": EVIL},
        "container": {"runtime": runtime, "image": image, "options": [f"--opt={EVIL}"]}})
    argv, proc = run_script(tmp_path, render(env, str(results_dir)), results_dir)
    assert proc.returncode == 0, proc.stderr
    _, words = rank_words(argv)
    assert f"--opt={EVIL}" in words and image in words
    assert not Path("/tmp/pwned").exists()
    (node,) = facts.read(results_dir / "out" / "task-r0.runtime")
    assert "error" not in node, node


def test_the_identity_cache_never_writes_through_a_planted_link_nor_waits_on_a_fifo(tmp_path: Path) -> None:
    image = tmp_path / "img.sif"
    image.write_bytes(b"an image")
    victim = tmp_path / "victim.json"
    victim.write_text("someone else's\n")
    cache = tmp_path / "cache" / "image-hashes.json"
    cache.parent.mkdir()
    cache.symlink_to(victim)
    first = image_hash.image_identity(str(image), cache)
    assert victim.read_text() == "someone else's\n" and cache.is_symlink()
    cache.unlink()
    os.mkfifo(cache)
    assert image_hash.image_identity(str(image), cache) == first   # a FIFO is no cache: hashed again, not waited on
    cache.unlink()
    image_hash.image_identity(str(image), cache)
    assert json.loads(cache.read_text())["hashes"]
