"""`matrix plan` refuses what the benchmark would refuse, before anything runs: each value against
bench's argument rules (runner/bench/contract.py), and the combinations of values bench refuses, with one
line naming the file, the field and what is allowed (exit status 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner import matrix
from runner.base.errors import ConfigError
from runner.base.exitcodes import Exit

HEAD = "environments: [{name: a, backend: local}]\n"

REFUSED = [
    ("axes: {model: [wrn], wrn_depth: [12]}", "axes.wrn_depth[0] (line 2)", "6n+4 with n >= 1"),
    ("axes: {lr: [0]}", "axes.lr[0] (line 2)", "a finite number above 0"),
    ("axes: {threads: [0]}", "axes.threads[0] (line 2)", "an integer of at least 1"),
    ("axes: {workers: [-1]}", "axes.workers[0] (line 2)", "an integer of at least 0"),
    ("axes: {loss_scale: [-1]}", "axes.loss_scale[0] (line 2)", "a finite number above 0"),
    ("axes: {image_size: [0]}", "axes.image_size[0] (line 2)", "an integer of at least 1"),
    ("run: {seed: -1}", "run.seed (line 2)", "an integer from 0 to 4294967295"),
    ("run: {seed: 4294967296}", "run.seed (line 2)", "an integer from 0 to 4294967295"),
    ("axes: {lr: [.inf]}", "axes.lr[0] (line 2)", "a finite number above 0"),
    ("axes: {loss_scale: [.nan]}", "axes.loss_scale[0] (line 2)", "a finite number above 0"),
    ("axes: {num_classes: [0]}", "axes.num_classes[0] (line 2)", "an integer of at least 1"),
    ("axes: {eval_batches: [0]}", "axes.eval_batches[0] (line 2)", "an integer of at least 1"),
    ("axes: {wrn_width: [0]}", "axes.wrn_width[0] (line 2)", "an integer of at least 1"),
    ("axes:\n  wrn_depth: [10, 28, 30]", "axes.wrn_depth[2] (line 3)", "6n+4"),
    ("include: [{model: wrn, wrn_depth: 13}]", "include[0].wrn_depth (line 2)", "6n+4"),
    # Allowed one by one, refused together: the smallest image each model takes.
    ("axes: {model: [mnist_cnn, cifar_vgg16], image_size: [28]}", "axes.image_size[0] (line 2)",
     "28 is too small for model cifar_vgg16; allowed: at least 32"),
    ("include: [{model: wrn, image_size: 2}]", "include[0].image_size (line 2)",
     "2 is too small for model wrn; allowed: at least 4"),
    ("axes: {model: [resnet18], image_size: [16]}", "axes.image_size[0] (line 2)", "at least 32"),
]


@pytest.mark.parametrize("body,field,allowed", REFUSED, ids=[r[1].split()[0] + ":" + r[0][-22:] for r in REFUSED])
def test_plan_refuses_what_bench_refuses(tmp_path: Path, body: str, field: str, allowed: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + body + "\n")
    with pytest.raises(ConfigError) as err:
        matrix.load(path)
    (line,) = str(err.value).splitlines()
    assert line.startswith(f"{path}: {field}: "), line
    assert "is not allowed; allowed: " in line or "is too small for model" in line
    assert allowed in line
    assert err.value.exit_code == Exit.USAGE == 2


def test_every_refused_value_is_listed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "axes: {lr: [0.1, 0], threads: [0]}\nrun: {seed: -1}\n")
    with pytest.raises(ConfigError) as err:
        matrix.load(path)
    lines = str(err.value).splitlines()
    assert [ln.split(": ")[1] for ln in lines] == ["axes.threads[0] (line 2)", "axes.lr[1] (line 2)",
                                                    "run.seed (line 3)"]


def test_a_combination_bench_refuses_can_be_excluded(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "axes: {model: [mnist_cnn, cifar_vgg16], image_size: [16, 32]}\n"
                    "exclude: [{model: cifar_vgg16, image_size: 16}]\n")
    cells = matrix.load(path).cells()
    assert sorted((c.params["model"], c.params["image_size"]) for c in cells) == [
        ("cifar_vgg16", 32), ("mnist_cnn", 16), ("mnist_cnn", 32)]


def test_values_at_the_edges_are_planned(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "axes: {model: [wrn], wrn_depth: [10, 16], lr: [1.0e-9], workers: [0], threads: [1],"
                    " image_size: [4]}\nrun: {seed: 4294967295, iterations: 0, warmup: 0}\n")
    assert len(matrix.load(path).cells()) == 2


def test_plan_says_it_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "axes: {model: [wrn], wrn_depth: [12]}\n")
    proc = subprocess.run([sys.executable, "-m", "runner.cli", "plan", "-m", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and proc.stdout == ""  # the status itself: ConfigError.exit_code, above
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "axes.wrn_depth[0] (line 2): 12 is not allowed; allowed: 6n+4 with n >= 1" in line
