"""The launcher in the zipapp (`python bench.pyz workload SPEC`) on small programs, and the placement of a
workload's files: one result line, statuses from the program's ending, nothing placed that was not hashed."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from runner.backends import artifact
from runner.backends.workloads.files import Changed, folder_name, scan, stage, tar_members
from runner.domain.outcomes import outcome_from_process

MLLOG_OK = ('print(\':::MLLOG {"key": "tracked_stats", "time_ms": 1, "value": {"throughput": 50}}\')\n'
            'print(\':::MLLOG {"key": "tracked_stats", "time_ms": 2, "value": {"throughput": 70}}\')\n')


def launch(tmp_path: Path, program: str, parser: Any = None, env: dict[str, str] | None = None,
           argv: list[str] | None = None) -> tuple[subprocess.CompletedProcess[str], Any]:
    (tmp_path / "prog.py").write_text(program)
    spec = {"v": 1, "name": "t", "argv": argv or ["{python}", str(tmp_path / "prog.py"), "{output}"],
            "values": {"batch_size": "8"}, "files": None, "params": {"batch_size": 8},
            "parser": parser or {"kind": "mllog", "file": None, "skip": 1, "require": ["throughput"],
                                 "throughput_key": "throughput"}}
    proc = subprocess.run([sys.executable, str(artifact.path()), "workload", json.dumps(spec)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})
    outcome = outcome_from_process(proc.stdout, proc.stderr, proc.returncode, 0.0, 1.0)
    return proc, outcome


def test_one_result_line_and_the_programs_output_on_stderr(tmp_path: Path) -> None:
    program = MLLOG_OK + ("import os, sys\nprint('MATRIX_RESULT {\"status\": \"ok\"}')\n"
                          "print('to stderr', file=sys.stderr)\nassert os.path.isdir(sys.argv[1])\n"
                          "open(os.path.join(sys.argv[1], 'scratch'), 'w').write('x')\nprint('OUT', sys.argv[1])\n")
    proc, outcome = launch(tmp_path, program)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("MATRIX_RESULT ") == 1 and proc.stdout.startswith("MATRIX_RESULT ")
    assert "to stderr" in proc.stderr and "MATRIX_RESULT {\"status\"" in proc.stderr
    assert outcome.status.value == "ok" and outcome.metrics["throughput"] == 70.0
    assert outcome.result["workload"]["argv"][0] == sys.executable  # {python}: the launcher's interpreter
    output = next(line.split()[1] for line in proc.stderr.splitlines() if line.startswith("OUT "))
    assert not os.path.exists(output)  # {output} is the repeat's own folder, removed after


@pytest.mark.parametrize("program, status, words", [
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "oom", "killed by SIGKILL"),
    ("import sys\nprint('RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB')\nsys.exit(1)\n", "oom",
     "CUDA out of memory"),
    ("import sys\nprint('halfway')\nsys.exit(7)\n", "failed", "the program exited with status 7: halfway"),
    ("print('done, no figures')\n", "failed", "mllog parser: found no throughput"),
])
def test_statuses_from_the_programs_ending(tmp_path: Path, program: str, status: str, words: str) -> None:
    proc, outcome = launch(tmp_path, program)
    assert outcome.status.value == status and words in outcome.reason, (outcome.reason, proc.stderr)
    assert proc.returncode == {"oom": 3, "failed": 1}[status]


def test_a_program_that_cannot_start_is_failed_with_why(tmp_path: Path) -> None:
    _, outcome = launch(tmp_path, "", argv=[str(tmp_path / "no-such-program"), "x"])
    assert outcome.status.value == "failed" and "cannot start" in outcome.reason and "No such file" in outcome.reason


def test_another_rank_ends_by_its_exit_status_and_prints_no_result(tmp_path: Path) -> None:
    proc, _ = launch(tmp_path, "print('rank 1 logs nothing')\n", env={"RANK": "1", "WORLD_SIZE": "2"})
    assert proc.returncode == 0 and "MATRIX_RESULT" not in proc.stdout
    proc, _ = launch(tmp_path, "raise SystemExit(5)\n", env={"RANK": "1", "WORLD_SIZE": "2"})
    assert proc.returncode == 1


def test_a_log_file_the_program_did_not_write(tmp_path: Path) -> None:
    parser = {"kind": "dllogger", "file": "{output}/dll.json", "skip": 1, "keys": {}, "accuracy_percent": False,
              "require": ["throughput"]}
    _, outcome = launch(tmp_path, "print('forgot the log')\n", parser=parser)
    assert outcome.status.value == "failed" and "wrote no log file" in outcome.reason


def test_files_are_placed_only_as_hashed(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    (tmp_path / "src" / "lib").mkdir()
    (tmp_path / "src" / "lib" / "util.py").write_text("X = 1\n")
    entries = (scan("train.py", tmp_path / "src"), scan("lib", tmp_path / "src"))
    placed = stage(entries, tmp_path / "staged")
    assert placed.name == folder_name(entries)
    assert (placed / "train.py").read_text() == "print(1)\n" and (placed / "lib" / "util.py").exists()
    assert stage(entries, tmp_path / "staged") == placed  # placed once, then reused
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar_members(entries, "/tmp/matrix", tar, 0.0)
    names = tarfile.open(fileobj=io.BytesIO(buf.getvalue())).getnames()
    assert f"tmp/matrix/{placed.name}/lib/util.py" in names and f"tmp/matrix/{placed.name}/train.py" in names
    (tmp_path / "src" / "train.py").write_text("print(2)\n")  # edited after the matrix was read
    with pytest.raises(Changed, match="changed since the matrix was read"):
        stage(entries, tmp_path / "other")
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    (tmp_path / "src" / "lib" / "new.py").write_text("")
    with pytest.raises(Changed, match="files added, removed or edited"):
        tar_members(entries, "/tmp/matrix", tarfile.open(fileobj=io.BytesIO(), mode="w"), 0.0)


def test_a_stopped_launcher_lets_its_program_finish_its_sigterm_handler(tmp_path: Path) -> None:
    """A time limit or scancel sends SIGTERM to every process of the step at once. The launcher passes it on and
    waits for the program (which may be writing a checkpoint), then ends as a SIGTERM ends a process: 143, no
    result (the scheduler's state says why), the program's handler done."""
    import signal
    import time

    done = tmp_path / "handler-done"
    program = (f"import signal, sys, time\n"
               f"def stop(*_):\n    time.sleep(1.5)\n    open({str(done)!r}, 'w').write('saved')\n    sys.exit(0)\n"
               "signal.signal(signal.SIGTERM, stop)\nprint('ready', flush=True)\n"
               "while True:\n    time.sleep(0.05)\n")
    (tmp_path / "prog.py").write_text(program)
    spec = {"v": 1, "name": "t", "argv": ["{python}", str(tmp_path / "prog.py")], "values": {}, "files": None,
            "params": {}, "parser": {"kind": "mllog", "file": None, "skip": 0, "require": ["throughput"],
                                     "throughput_key": "throughput"}}
    rank = subprocess.Popen([sys.executable, str(artifact.path()), "workload", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert rank.stderr is not None
    while "ready" not in (line := rank.stderr.readline()):
        assert line, "the program never started"
    time.sleep(0.3)
    os.killpg(rank.pid, signal.SIGTERM)  # the whole step, as slurmstepd signals it
    out, err = rank.communicate(timeout=60)
    assert done.read_text() == "saved", err
    assert rank.returncode == 143 and "MATRIX_RESULT" not in out, (rank.returncode, out, err)
    assert "asked to stop (SIGTERM)" in err
