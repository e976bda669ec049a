"""Adding a workload parser touches two files (docs/internals.md): a toy kind, `keyvalue` (lines name=value),
brought by tests/backends/workloads/plugins/ as a plug-in brings one, is read from matrix.yaml, shipped in the
benchmark and run end to end by `matrix run` on this host; the two registries name the same kinds."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.backends import artifact
from runner.backends.workloads import parse_settings as parsers
from runner.bench import parsers as bench_parsers
from runner.cli import app
from tests.backends.workloads.conftest import rows

PLUGINS = Path(__file__).with_name("plugins")
SETTINGS = "tests.backends.workloads.plugins.keyvalue_settings"

MATRIX = """
name: keyvalue
environments: [{name: here, backend: local, env: {OMP_NUM_THREADS: "1"}}]
workload:
  argv: ["{python}", "-c", "print('warming up'); print('throughput={batch_size}0.5'); print('loss_end=0.25')"]
  parser: {kind: keyvalue, metrics: [throughput, loss_end], unit: samples/s}
axes:
  batch_size: [4]
run: {repeats: 1, timeout: 120}
"""


@pytest.fixture
def keyvalue(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The two places: the settings model registered on the controller's side, the parser's module shipped in
    the benchmark beside parsers.py (a fresh cache, so the zip with it is nobody else's)."""
    sys.modules.pop(SETTINGS, None)
    importlib.import_module(SETTINGS)
    own = artifact.sources()
    monkeypatch.setattr(artifact, "sources", lambda: sorted([*own, PLUGINS / "parser_keyvalue.py"]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    artifact.payload.cache_clear()
    try:
        yield
    finally:
        parsers.PARSERS.forget("keyvalue")
        sys.modules.pop(SETTINGS, None)
        artifact.payload.cache_clear()


def test_a_toy_parser_runs_a_real_workload_end_to_end(keyvalue: None, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX)
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w"])
    assert done.exit_code == 0, done.output
    (row,) = rows(tmp_path / "r.db")
    assert row["status"] == "ok", row["reason"] + row["log_tail"]
    assert row["metrics"]["throughput"] == 40.5 and row["metrics"]["loss_end"] == 0.25
    assert row["metrics"]["definitions"]["throughput"] == {"how": "keyvalue: the last line throughput=VALUE",
                                                           "unit": "samples/s"}
    assert row["raw"]["workload"]["found"]["names"] == ["loss_end", "throughput"]


def test_a_toy_parsers_nan_loss_makes_the_repeat_diverged(keyvalue: None, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser of a new kind hands its losses to `loss()`: a NaN among them (its last loss finite) is diverged."""
    printed = "print('throughput=40.5'); print('loss_end=2.3'); print('loss_end=nan'); print('loss_end=1.0')"
    (tmp_path / "m.yaml").write_text(MATRIX.replace(
        "\"print('warming up'); print('throughput={batch_size}0.5'); print('loss_end=0.25')\"", json.dumps(printed)))
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w"])
    assert done.exit_code == 3, done.output
    (row,) = rows(tmp_path / "r.db")
    assert row["status"] == "diverged", row["reason"] + row["log_tail"]
    assert row["reason"] == ("keyvalue parser: loss became nan at the 2nd of the 3 losses read (keyvalue: loss_end "
                             "lines); last finite loss 2.3 before it")
    assert "diverged" in done.output


def test_the_toy_kind_owns_its_settings_and_is_known_only_while_registered(keyvalue: None, tmp_path: Path) -> None:
    settings, problems = parsers.validate({"kind": "keyvalue", "metrics": ["memory"]})
    assert settings is None and "'memory' is not a metric keyvalue gives" in problems[0][1]
    _, problems = parsers.validate({"kind": "keyvalue", "figures": {}})
    assert problems == [((), "figures is not a setting of the keyvalue parser; its settings: file, metrics, unit")]
    parsers.PARSERS.forget("keyvalue")
    _, problems = parsers.validate("keyvalue")
    assert problems[0][0] == ("kind",)
    assert "'keyvalue' is not allowed; allowed: dllogger, matrix, mllog, pattern" in problems[0][1]
    assert "runner/backends/workloads/parse_settings.py" in problems[0][1] and "\n" not in problems[0][1]


def test_both_sides_register_the_same_kinds() -> None:
    """The contract between the controller and the benchmark: every kind matrix.yaml may name has a parser in
    the benchmark (built in, or its module parser_KIND.py there), and no parser lacks a settings model."""
    bench = set(bench_parsers.PARSERS) | {p.stem.removeprefix("parser_")
                                          for p in Path(bench_parsers.__file__).parent.glob("parser_*.py")}
    assert set(parsers.PARSERS.names()) == bench


def test_the_benchmark_names_its_kinds_for_an_unknown_one() -> None:
    with pytest.raises(ValueError, match="no workload parser 'nosuch' in this benchmark .it has dllogger, matrix"):
        bench_parsers.make({"kind": "nosuch"})
