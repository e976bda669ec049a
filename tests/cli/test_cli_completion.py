"""Shell completion as a person gets it: `matrix --install-completion` in an interactive bash, then Tab completes a
command, an option and the values of options, each list read from the table that defines it."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import backends
from runner.cli import complete
from runner.domain.bench_contract import PRECISIONS
from runner.record.metrics import METRICS, Metric
from runner.report.formats import FORMATS

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(shutil.which("bash") is None or not (BIN / "matrix").exists(),
                                reason="needs bash and the installed `matrix` script")


class Bash:
    """An interactive bash on a terminal of its own, as a person types into it."""

    def __init__(self, home: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: bash reads its ~/.bashrc, where the completion is installed
            # PROMPT_COMMAND sets the prompt after the system's bashrc has set its own (Debian's names user@host).
            os.execve(shutil.which("bash") or "bash", ["bash", "-i"],
                      {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(home), "PS1": "$ ", "TERM": "dumb",
                       "PROMPT_COMMAND": "PS1='$ '"})
        self.read_until("$ ")

    def read_until(self, wanted: str, timeout: float = 60.0) -> str:
        out = ""
        end = time.monotonic() + timeout
        while wanted not in out and time.monotonic() < end:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    out += os.read(self.fd, 65536).decode(errors="replace")
                except OSError:
                    break
        return out

    def tab(self, typed: str, wanted: str) -> str:
        """Type `typed` and Tab; what the line reads once `wanted` shows (or the time is up); the line is cleared."""
        os.write(self.fd, typed.encode() + b"\t")
        line = self.read_until(wanted)
        os.write(self.fd, b"\x15")  # Ctrl-U
        time.sleep(0.3)
        return line

    def run(self, command: str, wanted: str) -> str:
        os.write(self.fd, command.encode() + b"\n")
        return self.read_until(wanted)

    def close(self) -> None:
        os.write(self.fd, b"exit\n")
        os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def bash(tmp_path: Path) -> Iterator[Bash]:
    home = tmp_path / "home"
    home.mkdir()
    first = Bash(home)
    said = first.run("matrix --install-completion", "restart the terminal")
    first.close()
    assert "bash completion installed in" in said, said
    assert "source" in (home / ".bashrc").read_text()
    shell = Bash(home)  # a new terminal, as the message says
    try:
        yield shell
    finally:
        shell.close()


@pytest.mark.slow
def test_install_completion_then_tab_completes_commands_options_and_values(bash: Bash) -> None:
    assert "matrix compare " in bash.tab("matrix compa", "compare ")
    assert "matrix run --rerun-failed " in bash.tab("matrix run --rerun-f", "failed ")
    assert "--metric images_per_joule " in bash.tab("matrix compare a b --metric images_per_j", "joule ")
    # bash breaks words at `=` and `:`; the value is completed as one word all the same.
    assert "--only precision=bf16 " in bash.tab("matrix run --only precision=bf", "bf16 ")
    # An axis alone completes to `axis=` with no space after it, so that its value follows.
    assert "--only precision=bf16 " in bash.tab("matrix run --only precisio\tbf", "bf16 ")
    assert "matrix compare backend:docker " in bash.tab("matrix compare backend:doc", "docker ")


def words(line: str, cword: int) -> list[str]:
    """What the completion answers for a command line as bash splits it (COMP_WORDS, COMP_CWORD)."""
    env = {**os.environ, "COMP_WORDS": line, "COMP_CWORD": str(cword), "_MATRIX_COMPLETE": "complete_bash"}
    done = subprocess.run([str(BIN / "matrix")], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_lists_are_the_tables() -> None:
    with METRICS.adding(Metric("planted_metric", "planted", "", True)):
        assert "planted_metric" in complete.metrics("plan")
    assert "planted_metric" not in complete.metrics("plan")
    assert complete.report_formats("") == FORMATS.names()
    assert complete.only("precision=") == [f"precision={p}" for p in PRECISIONS]
    assert complete.sides("backend:") == [f"backend:{k}" for k in backends.kinds()]
    # Through the completion protocol, as bash splits `--only precision=` (a break at `=`): what follows it.
    assert words("matrix run --only precision =", 4) == list(PRECISIONS)
