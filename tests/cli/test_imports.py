"""The command line answers at once: `import runner.cli` (which imports every command's module, for `--help`) loads
none of pandas, scipy, matplotlib, torch or Jinja2, and neither do the everyday commands as they run (`--help`,
`plan`, `ls`, `show`, `export`, `import`; `doctor` and `clean` by what they ask the backends). A command whose work
needs them (report, compare, publish) imports them when it runs. Each probe is a fresh interpreter: in this one,
other tests have loaded everything already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner.commands.base import COMMANDS
from tests.analysis.helpers import rows_for, store_of

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "scipy", "matplotlib", "torch", "jinja2")
# Runs `code` in a fresh interpreter; at exit (a command's SystemExit included) it says which heavy modules it
# loaded and how it exited.
PROBE = f"""
import atexit, json, sys
atexit.register(lambda: print("loaded:" + json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)),
                              file=sys.stderr))
"""


def heavy_after(code: str, cwd: Path = ROOT) -> list[str]:
    """The heavy modules a fresh interpreter holds after running `code` (which must end well: exit status 0)."""
    done = subprocess.run([sys.executable, "-c", PROBE + code], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    line = [x for x in done.stderr.splitlines() if x.startswith("loaded:")][-1]
    loaded: list[str] = json.loads(line.removeprefix("loaded:"))
    return loaded


def command(*argv: str) -> str:
    """Code that runs `matrix ARGV` as the console script does, exiting with its status."""
    return f"import sys\nsys.argv = ['matrix', *{list(argv)!r}]\nfrom runner.cli import main\nmain()\n"


def test_importing_the_command_line_loads_no_heavy_library() -> None:
    assert heavy_after("import runner.cli") == []


@pytest.mark.parametrize("name", sorted(COMMANDS.names()))
def test_no_command_module_loads_a_heavy_library(name: str) -> None:
    """Every command's module: `matrix --help` imports each for its help page."""
    assert heavy_after(f"from runner.commands.base import COMMANDS\nCOMMANDS.get({name!r})") == []


def test_the_probe_sees_a_heavy_import() -> None:
    """The probe itself can fail: a command whose work needs pandas (compare) is seen loading it."""
    assert "pandas" in heavy_after("import runner.commands.decide")


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("store") / "results.db"
    return store_of(db, rows_for("k1", [100.0, 101.0, 99.0], run_id="20261128-120000-aaaaaa")
                    + rows_for("k2", [50.0, 51.0], run_id="20261128-120000-aaaaaa", precision="bf16"))


@pytest.mark.parametrize("argv", [["--help"], ["ls"], ["ls", "--imports"], ["show"], ["show", "--help"]])
def test_the_everyday_commands_load_none_as_they_run(small_store: Path, argv: list[str]) -> None:
    db = [] if "--help" in argv else ["--db", str(small_store)]
    assert heavy_after(command(*argv, *db)) == []


def test_plan_export_and_import_load_none_as_they_run(small_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl.gz"
    assert heavy_after(command("plan", "--db", str(small_store)), cwd=tmp_path) == []  # the embedded quickstart
    assert heavy_after(command("export", "-o", str(out), "--db", str(small_store))) == []
    assert heavy_after(command("import", str(out), "--db", str(tmp_path / "other.db"))) == []


def test_doctor_and_clean_ask_backends_that_load_none() -> None:
    """`doctor` and `clean` ask every backend (probing Docker and Slurm takes seconds, so their backends are
    loaded here rather than the commands run)."""
    assert heavy_after("from runner import backends\nfor kind in backends.kinds():\n    backends.get(kind)\n"
                       "import runner.commands.doctor, runner.commands.clean") == []
