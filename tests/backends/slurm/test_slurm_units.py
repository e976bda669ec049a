"""The slurm backend's pure parts: the rendered script (golden), quoting, validation, sacct parsing,
state mapping. No Slurm needed: these run everywhere."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from runner.backends.base import NotStarted
from runner.backends.context import RunContext
from runner.backends.slurm import SlurmBackend, SlurmEnvironment, commands, task_outcomes
from runner.backends.slurm.commands import SacctRow, parse_sacct, slurm
from runner.backends.slurm.script import array_job, render_script, sbatch_quote
from runner.backends.slurm.state import Watched
from runner.base.errors import BackendError, ConfigError, StoreError
from runner.domain.cells import Cell, RunSettings, Task
from runner.domain.outcomes import Outcome, Status
from runner.store import Store

GOLDEN = Path(__file__).with_name("golden")
EVIL = "$(touch /tmp/pwned) `touch /tmp/pwned` 'q' \"d\" ;touch /tmp/pwned #c \\ %j"


def hostile_env() -> SlurmEnvironment:
    return SlurmEnvironment(
        name=f"env {EVIL}", python=f"/opt/py {EVIL}/bin/python3", partition=f"gpu {EVIL}",
        account="acct'x", qos='q"x', cpus_per_task=2, mem="16G", gpus_per_node=1,
        sbatch_options=[f"--constraint=a100&{EVIL}", "--exclusive", "--reservation maint"],
        env={"HOSTILE": EVIL, "NCCL_DEBUG": "INFO"}, setup=["module load pytorch/1.13"],
        container=None)


def render_hostile() -> str:
    env = hostile_env()
    job = array_job(env, count=12, gpus=4, nodes=2, time="00:30:00", run_id="20260101-000000-abcdef",
                    results_dir=Path(f"/shared/results {EVIL}/run"), manifest="manifest-001.tsv",
                    bench_name="bench-0123456789ab.pyz")
    return render_script(job)


def test_rendered_script_matches_golden() -> None:
    """The whole script for hostile values, reviewed once by a person: any change shows up here."""
    text = render_hostile()
    golden = GOLDEN / "hostile.sh"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), "rendered script changed: review, then UPDATE_GOLDEN=1 pytest"


def test_rendered_script_is_valid_bash_and_values_are_single_words() -> None:
    text = render_hostile()
    check = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr
    # What bash sees for the assignments: exactly the hostile values, nothing expanded.
    lines = [ln for ln in text.splitlines() if ln.startswith(("PYTHON=", "RESULTS=", "export HOSTILE="))]
    probe = "\n".join(lines) + '\nprintf "%s\\0" "$PYTHON" "$RESULTS" "$HOSTILE"\n'
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.split("\0")[:3] == [f"/opt/py {EVIL}/bin/python3", f"/shared/results {EVIL}/run", EVIL]
    assert not Path("/tmp/pwned").exists()


def sbatch_words(line: str) -> list[str]:
    """sbatch's own reading of a #SBATCH line (src/sbatch/opt.c, _get_argument), in Python."""
    words, i = [], 0
    while i < len(line):
        while i < len(line) and line[i].isspace():
            i += 1
        if i >= len(line):
            break
        word, quote, escape = "", "", False
        while i < len(line) and (quote or not line[i].isspace()):
            c = line[i]
            i += 1
            if escape:
                escape = False
            elif c == "\\":
                escape = True
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    continue
            elif c in "\"'":
                quote = c
                continue
            elif c == "#":
                return words + ([word] if word else [])
            word += c
        words.append(word)
    return words


@pytest.mark.parametrize("value", [EVIL, "plain", "a b", "it's", 'say "hi"', "back\\slash", "#hash", "100%", ""])
def test_sbatch_quote_reads_back_as_the_value(value: str) -> None:
    assert sbatch_words(f"--job-name={sbatch_quote(value)}") == [f"--job-name={value}"]


def test_sbatch_lines_of_the_golden_script_read_back_exactly() -> None:
    sbatch = {w.split("=", 1)[0]: w.split("=", 1)[1] if "=" in w else None
              for ln in render_hostile().splitlines() if ln.startswith("#SBATCH ")
              for w in sbatch_words(ln[len("#SBATCH "):])}
    assert sbatch["--job-name"] == f"matrix-env {EVIL}"
    assert sbatch["--partition"] == f"gpu {EVIL}"
    assert sbatch["--account"] == "acct'x" and sbatch["--qos"] == 'q"x'
    assert sbatch["--constraint"] == f"a100&{EVIL}"
    assert sbatch["--chdir"] == f"/shared/results {EVIL}/run"
    assert sbatch["--gres"] == "gpu:1" and sbatch["--nodes"] == "2" and sbatch["--ntasks-per-node"] == "4"
    assert sbatch["--exclusive"] is None and sbatch["--reservation"] == "maint"


def test_newlines_cannot_reach_an_sbatch_line() -> None:
    with pytest.raises(ValidationError, match="one line"):
        SlurmEnvironment(name="x", partition="gpu\n#SBATCH --uid=0")
    with pytest.raises(ValidationError, match="one line"):
        SlurmEnvironment(name="x", sbatch_options=["--constraint=a\n#SBATCH --x"])
    with pytest.raises(ConfigError, match="one line"):
        sbatch_quote("a\nb")
    # A name with a newline is refused when the file is read (names are one line everywhere); the job name
    # would still be made harmless.
    with pytest.raises(ValidationError, match="control character"):
        SlurmEnvironment(name="two\nlines", gpus_per_node=0)
    env = SlurmEnvironment.model_construct(name="two\nlines", gpus_per_node=0)  # defaults, unvalidated
    job = array_job(env, count=1, gpus=1, nodes=1, time="1", run_id="r", results_dir=Path("/r"), manifest="m", bench_name="b.pyz")
    assert "#SBATCH --job-name=\"matrix-two?lines\"" in render_script(job)


@pytest.mark.parametrize("field,value,message", [
    ("env", {"BAD NAME": "x"}, "not a shell variable name"),
    ("env", {"X;touch /tmp/p": "x"}, "not a shell variable name"),
    ("sbatch_options", ["rm -rf /"], "not an sbatch option"),
    ("sbatch_options", ["--partition=other"], "set by matrix"),
    ("sbatch_options", ["--output=/tmp/x"], "set by matrix"),
    ("time", "an hour", "not a Slurm time limit"),
    ("mem", "16 GB", "not an sbatch --mem value"),
])
def test_invalid_fields_are_refused_with_what_to_do(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SlurmEnvironment.model_validate({"name": "x", field: value})


def test_time_limit_defaults_to_the_run_timeout_in_minutes() -> None:
    env = SlurmEnvironment(name="x", time=90)  # YAML `time: 90` is an int: minutes
    assert env.time == "90"
    from runner.backends.slurm.script import time_limit
    assert time_limit(SlurmEnvironment(name="x"), 61) == "2"
    assert time_limit(SlurmEnvironment(name="x"), 5) == "1"
    assert time_limit(env, 5) == "90"


def test_container_goes_through_srun_with_the_results_dir_mounted() -> None:
    env = SlurmEnvironment.model_validate({"name": "c", "container": "nvcr.io#nvidia/pytorch:24.10-py3",
                                           "mounts": [{"source": "/data", "target": "/data"}]})
    text = render_script(array_job(env, count=1, gpus=2, nodes=1, time="5", run_id="r",
                                   results_dir=Path("/shared/r 1"), manifest="m", bench_name="b.pyz"))
    assert "--container-image=nvcr.io#nvidia/pytorch:24.10-py3" in text
    assert "'--container-mounts=/shared/r 1:/shared/r 1,/data:/data:ro'" in text
    assert "#SBATCH --gres=gpu:2" in text  # gpus_per_node unset: one GPU per process
    assert "'--container-workdir=/shared/r 1'" in text
    with pytest.raises(ValidationError, match="pyxis cannot bind the path '/a,b'"):
        SlurmEnvironment.model_validate({"name": "c", "container": "img",
                                         "mounts": [{"source": "/a,b", "target": "/x"}]})


def test_parse_sacct_rows_pending_ranges_and_states() -> None:
    text = ("41_0|COMPLETED|0:0|00:00:05|2026-01-01T10:00:00|2026-01-01T10:00:05|vm\n"
            "41_1|CANCELLED by 0|0:15|00:00:02|2026-01-01T10:00:00|2026-01-01T10:00:02|vm\n"
            "41_[2-4,7%4]|PENDING|0:0|00:00:00|Unknown|Unknown|None assigned\n"
            "42_7|FAILED|3:0|00:00:09|2026-01-01T10:00:00|2026-01-01T10:00:09|vm\n"
            "43_[0-1]|CANCELLED by 0|0:0|00:00:00|None|2026-01-01T10:00:09|None assigned\n"
            "garbage line\n")
    rows = parse_sacct(text)
    assert set(rows) == {("41", 0), ("41", 1), ("41", 2), ("41", 3), ("41", 4), ("41", 7), ("42", 7),
                         ("43", 0), ("43", 1)}
    assert rows[("41", 3)].state == "PENDING" and rows[("41", 3)].start is None
    # An array cancelled before its tasks started: one range row, every index cancelled.
    assert rows[("43", 1)].state == "CANCELLED"
    assert rows[("41", 1)].state == "CANCELLED" and rows[("41", 1)].signal == 15
    assert rows[("42", 7)].exit_code == 3 and rows[("42", 7)].job_id == "42_7"
    assert rows[("41", 0)].end is not None and rows[("41", 0)].end - rows[("41", 0)].start == 5  # type: ignore[operator]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "m.db") as s:
        yield s


@pytest.fixture
def backend(tmp_path: Path, store: Store) -> tuple[SlurmBackend, Watched]:
    env = SlurmEnvironment(name="u", gpus_per_node=0, time="1")
    ctx = RunContext(run_id="r1", workdir=tmp_path, store=store)
    b = SlurmBackend(env, ctx)
    task = Task(Cell(env, {"model": "mlp"}, RunSettings()), 0)
    for sub in ("out", "work", "logs"):
        (b.results_dir / sub).mkdir(parents=True)
    return b, Watched(task, "k", "41", 3, b.results_dir, time.time(), "r0")


def row(state: str, code: int = 0) -> SacctRow:
    return SacctRow("41", 3, state, code, 0, "00:01:00", 1.0, 2.0, "vm")


@pytest.mark.parametrize("state,status", [
    ("TIMEOUT", Status.TIMEOUT), ("DEADLINE", Status.TIMEOUT), ("OUT_OF_MEMORY", Status.OOM),
    ("CANCELLED", Status.CANCELLED), ("PREEMPTED", Status.CANCELLED), ("NODE_FAIL", Status.CANCELLED),
    ("BOOT_FAIL", Status.CANCELLED), ("FAILED", Status.FAILED), ("COMPLETED", Status.FAILED),
])
def test_slurm_states_without_a_result_file_map_to_statuses(backend: tuple[SlurmBackend, Watched],
                                                            state: str, status: Status) -> None:
    b, w = backend
    (w.results_dir / "work" / f"{w.task.id}.rank0.log").write_text("Traceback ...\nRuntimeError: boom\n")
    (w.results_dir / "logs" / "41_3.out").write_text("slurmstepd: error: *** JOB 44 ON vm CANCELLED ***\n")
    r = row(state, 1 if state == "FAILED" else 0)
    outcome = task_outcomes.from_state(b.env, w, r, b._extra(w, r))
    assert outcome.status is status
    assert "41_3" in outcome.reason and outcome.env["slurm_state"] == state
    assert "RuntimeError: boom" in outcome.log_tail and "slurmstepd" in outcome.log_tail
    if state == "COMPLETED":
        assert "filesystem" in outcome.reason  # the result file is missing: say why that may be


def test_failed_job_with_a_result_file_keeps_the_bench_status(backend: tuple[SlurmBackend, Watched]) -> None:
    b, w = backend
    out = w.results_dir / "out"
    result = {"schema": 1, "status": "oom", "reason": "CUDA out of memory", "metrics": {}, "env": {}}
    (out / f"{w.task.id}.out").write_text("MATRIX_RESULT " + json.dumps(result) + "\n")
    (out / f"{w.task.id}.err").write_text("")
    (out / f"{w.task.id}.done").write_text(json.dumps({"schema": 1, "returncode": 3, "srun_returncode": 3,
                                                       "started_at": 1.0, "finished_at": 2.0}))
    outcome = task_outcomes.from_files(w, row("FAILED", 3), b._extra(w, None))
    assert outcome.status is Status.OOM and outcome.reason == "CUDA out of memory"
    # A rank other than 0 failed while rank 0 reported ok: the repeat failed.
    result["status"], result["reason"] = "ok", None
    (out / f"{w.task.id}.out").write_text("MATRIX_RESULT " + json.dumps(result) + "\n")
    (out / f"{w.task.id}.done").write_text(json.dumps({"schema": 1, "returncode": 0, "srun_returncode": 1,
                                                       "started_at": 1.0, "finished_at": 2.0}))
    outcome = task_outcomes.from_files(w, row("FAILED", 1), b._extra(w, None))
    assert outcome.status is Status.FAILED and "rank" in outcome.reason


def test_submitted_jobs_live_in_the_store_and_survive_reopening(tmp_path: Path) -> None:
    env = SlurmEnvironment(name="u", gpus_per_node=0)
    cell = Cell(env, {"model": "mlp"}, RunSettings())
    with Store(tmp_path / "m.db") as store:
        b = SlurmBackend(env, RunContext(run_id="r1", workdir=tmp_path / "w1", store=store))
        ws = [Watched(Task(cell, r), f"k{r}", "41", r, b.results_dir, 1.0, "r1") for r in range(3)]
        b.state.add(ws)
        b.state.remove(["k0"], "collected")
        b.state.add([Watched(Task(cell, 1), "k1", "42", 0, b.results_dir, 2.0, "r2")])  # submitted again
    with Store(tmp_path / "m.db") as store:  # another process, another workdir: the store alone is enough
        jobs = SlurmBackend(env, RunContext(run_id="r3", workdir=tmp_path / "elsewhere", store=store)).state.load()
        assert {k: (j.job, j.index) for k, j in jobs.items()} == {"k1": ("42", 0), "k2": ("41", 2)}
        rows = store.db.execute("SELECT task_key, closed_how FROM batch_jobs ORDER BY id").fetchall()
        assert [tuple(r) for r in rows] == [("k0", "collected"), ("k1", "superseded"), ("k2", None), ("k1", None)]
        store.db.execute("UPDATE batch_jobs SET schema=99 WHERE task_key='k2'")
        store.db.commit()
        with pytest.raises(StoreError, match="schema 99"):
            store.open_jobs("slurm")


def test_a_legacy_state_file_moves_into_the_store(tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_commands(tmp_path, monkeypatch, sacct="", sbatch="")
    legacy = tmp_path / "slurm" / "submitted.json"
    legacy.parent.mkdir()
    legacy.write_text(json.dumps({"schema": 1, "tasks": {"u\tabc\t0": {
        "job": "7", "index": 2, "task": "abc-r0", "results_dir": "/r", "submitted_at": 5.0, "run_id": "old"}}}))
    with SlurmBackend(SlurmEnvironment(name="u"), RunContext(run_id="r", workdir=tmp_path, store=store)) as b:
        (job,) = b.state.load().values()
    assert (job.job, job.index, job.run_id, job.results_dir) == ("7", 2, "old", "/r")
    assert not legacy.exists() and legacy.with_name("submitted.json.imported").exists()


def test_missing_slurm_commands_are_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendError, match="sbatch.*not on PATH.*slurm-client"):
        slurm(["sbatch", "--version"])
    env = SlurmEnvironment(name="u")
    with pytest.raises(NotStarted, match="not on PATH"):
        SlurmBackend(env, RunContext(run_id="r", workdir=tmp_path)).__enter__()
    client, *runtimes = SlurmBackend.doctor()
    assert client.ok is None and "no Slurm" in client.detail
    # The container runtimes are still named, each not applicable: nothing is on this PATH.
    assert [c.name for c in runtimes] == ["runtime apptainer", "runtime podman", "runtime charliecloud",
                                          "runtime pyxis"] and all(c.ok is None for c in runtimes)


def test_a_slurm_command_that_hangs_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "sinfo"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert shutil.which("sinfo") == str(fake)
    with pytest.raises(BackendError, match="did not answer within 0.5 s"):
        slurm(["sinfo"], timeout=0.5)


def fake_scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **bodies: str) -> None:
    """Slurm commands as small sh scripts (name=body), first on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in bodies.items():
        (bindir / name).write_text(f"#!/bin/sh\n{body}")
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")


def fake_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **outputs: str) -> None:
    """Slurm commands that print fixed text, first on PATH."""
    fake_scripts(tmp_path, monkeypatch, **{name: f"printf '%s' {shlex.quote(text)}\n"
                                           for name, text in outputs.items()})


def test_a_job_nobody_knows_is_lost_not_waited_for_forever(backend: tuple[SlurmBackend, Watched],
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b, w = backend
    w.submitted_at = time.time() - 3600
    fake_commands(tmp_path, monkeypatch, sacct="", squeue="")
    # An earlier run's task: forgotten, so that `matrix run` submits it again; nothing reported.
    reported: list[object] = []
    watch = {w.key: w}
    b._poll(watch, lambda t, o: reported.append(o), first=True)
    assert watch == {} and reported == []
    # A task this run submitted: a failed repeat that says what happened.
    watch = {w.key: w}
    b._poll(watch, lambda t, o: reported.append(o))
    assert watch == {} and len(reported) == 1
    assert reported[0].status is Status.FAILED and "lost" in reported[0].reason  # type: ignore[attr-defined]


def test_a_job_only_the_controller_knows_is_waited_for(backend: tuple[SlurmBackend, Watched],
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b, w = backend
    w.submitted_at = time.time() - 3600
    fake_commands(tmp_path, monkeypatch, sacct="", squeue="41\n")  # accounting lags behind
    watch = {w.key: w}
    b._poll(watch, lambda t, o: pytest.fail("nothing is over"))
    assert list(watch) == [w.key]


def test_an_unreachable_controller_is_retried_then_not_started_with_one_reason_and_no_more_sbatch(
        tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "SBATCH_BACKOFF_S", 0.01)
    count = tmp_path / "sbatch-calls"
    fake_scripts(tmp_path, monkeypatch,
                 sbatch=f"echo x >> {shlex.quote(str(count))}\n"
                        "echo 'sbatch: error: Batch job submission failed: Unable to contact slurm "
                        "controller (connect failure)' >&2\nexit 1\n",
                 sacct="exit 0\n")
    env = SlurmEnvironment(name="u", gpus_per_node=0)
    run = RunSettings(iterations=1, warmup=0, repeats=1, timeout=60, seed=0)
    tasks = [Task(Cell(env, {"model": "mlp", "gpus": g}, run), 0) for g in (1, 2, 4)]  # three shapes
    got: list[tuple[Task, object]] = []
    with SlurmBackend(env, RunContext(run_id="r", workdir=tmp_path, store=store)) as b:
        b.run(tasks, lambda t, o: got.append((t, o)))
    assert [t for t, _ in got] == tasks
    assert {o.status for _, o in got} == {Status.NOT_STARTED}  # type: ignore[attr-defined]
    reasons = {o.reason for _, o in got}  # type: ignore[attr-defined]
    assert len(reasons) == 1 and "scontrol ping" in reasons.pop()
    assert count.read_text().count("x") == commands.SBATCH_TRIES, "retried, then no sbatch for the other shapes"


def test_without_accounting_nothing_is_submitted_but_finished_files_are_collected(
        tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_scripts(tmp_path, monkeypatch,
                 sacct="echo 'sacct: error: Problem talking to the database: Connection refused' >&2\nexit 1\n",
                 sbatch=f"touch {shlex.quote(str(tmp_path / 'sbatch-ran'))}\necho 99\n",
                 squeue="exit 0\n")
    env = SlurmEnvironment(name="u", gpus_per_node=0)
    run = RunSettings(iterations=1, warmup=0, repeats=2, timeout=60, seed=0)
    cell = Cell(env, {"model": "mlp"}, run)
    earlier, new = Task(cell, 0), Task(cell, 1)
    # An earlier run submitted repeat 0, and its result file is there.
    old = SlurmBackend(env, RunContext(run_id="old", workdir=tmp_path, store=store))
    (old.results_dir / "out").mkdir(parents=True)
    result = {"schema": 1, "status": "ok", "reason": None, "metrics": {"throughput": 5.0}, "env": {}}
    (old.results_dir / "out" / f"{earlier.id}.out").write_text("MATRIX_RESULT " + json.dumps(result) + "\n")
    (old.results_dir / "out" / f"{earlier.id}.done").write_text(json.dumps(
        {"schema": 1, "returncode": 0, "srun_returncode": 0, "started_at": 1.0, "finished_at": 2.0}))
    old.state.add([Watched(earlier, "u\t" + cell.key + "\t0", "98", 0, old.results_dir, time.time(), "old")])
    got: dict[str, object] = {}
    with SlurmBackend(env, RunContext(run_id="new", workdir=tmp_path, store=store)) as b:
        b.run([earlier, new], lambda t, o: got.update({t.id: o}))
    assert got[earlier.id].status is Status.OK  # type: ignore[attr-defined]
    assert got[new.id].status is Status.NOT_STARTED  # type: ignore[attr-defined]
    assert "not submitted" in got[new.id].reason and "slurmdbd" in got[new.id].reason  # type: ignore[attr-defined]
    assert not (tmp_path / "sbatch-ran").exists()


def test_a_marker_without_a_result_waits_for_the_final_state_which_says_timeout(
        backend: tuple[SlurmBackend, Watched], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A time limit kills the ranks, the batch script still publishes its marker (exit 143, no result):
    the repeat is a timeout, not a failure, once sacct says so; until then it is not decided."""
    b, w = backend
    out = w.results_dir / "out"
    (out / f"{w.task.id}.out").write_text("")
    (out / f"{w.task.id}.err").write_text("srun: error: node1: task 0: Terminated\n")
    (w.results_dir / "work" / f"{w.task.id}.rank0.log").write_text("[bench] 10000000 measured iterations\n")
    (w.results_dir / "logs" / "41_3.out").write_text("slurmstepd: error: *** JOB 41 ON node1 CANCELLED AT "
                                                     "2026-11-22T05:10:51 DUE TO TIME LIMIT ***\n")
    (out / f"{w.task.id}.done").write_text(json.dumps({"schema": 1, "returncode": 143, "srun_returncode": 143,
                                                       "started_at": 1.0, "finished_at": 2.0}))
    fake_commands(tmp_path, monkeypatch, sacct="41_3|RUNNING|0:0|00:01:00|1|Unknown|node[1-2]\n", squeue="")
    watch = {w.key: w}
    b._poll(watch, lambda t, o: pytest.fail(f"decided while sacct says RUNNING: {o}"))
    assert list(watch) == [w.key]
    reported: list[Outcome] = []
    (tmp_path / "later").mkdir()
    fake_commands(tmp_path / "later", monkeypatch, sacct="41_3|TIMEOUT|0:15|00:01:02|1|63|node[1-2]\n", squeue="")
    b._poll(watch, lambda t, o: reported.append(o))
    assert watch == {} and [o.status for o in reported] == [Status.TIMEOUT], reported
    assert "time limit" in reported[0].reason and "DUE TO TIME LIMIT" in reported[0].log_tail


@pytest.mark.parametrize("ended_ago,decided", [(5, False), (31, False), (119, False), (121, True), (7200, True)])
def test_a_job_over_without_its_marker_waits_for_it_unless_it_ended_long_ago(
        backend: tuple[SlurmBackend, Watched], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        ended_ago: int, decided: bool) -> None:
    """sacct says COMPLETED and no marker is visible on the first look. A network filesystem may still hide it, so
    the controller waits (30 s from its first look), even with a controller's clock 30 s behind; a job that ended
    more than two minutes ago is decided at once, so that `matrix collect` run again and again, each run shorter
    than the wait, still gathers it."""
    b, w = backend
    end = int(time.time()) - ended_ago
    fake_commands(tmp_path, monkeypatch, sacct=f"41_3|COMPLETED|0:0|00:01:00|1|{end}|node1\n", squeue="")
    reported: list[Outcome] = []
    watch = {w.key: w}
    b._poll(watch, lambda t, o: reported.append(o))
    if decided:
        assert len(reported) == 1 and reported[0].status is Status.FAILED and "did not appear" in reported[0].reason
    else:
        assert reported == [] and list(watch) == [w.key]
