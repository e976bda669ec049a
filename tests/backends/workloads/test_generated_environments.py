"""Environments made on the command line (run --image, bisect --images with or without --template) run the
matrix's workload, never the built-in benchmark in its place; where the matrix's environments run different
workloads, the option is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import matrix as matrix_mod
from runner.base.errors import ConfigError
from runner.bisect.envs import plan
from runner.commands.run import with_image

MATRIX = """
name: gen
environments:
  - {name: host, backend: local}
  - {name: box, backend: docker, image: "debian-torch:1.13"}
workload:
  argv: ["{python}", "-c", "print('speed 123 img/s')", "{batch_size}"]
  parser: {kind: pattern, figures: {throughput: {regex: 'speed ([0-9]+)', unit: img/s}}}
axes: {batch_size: [8]}
run: {repeats: 1}
"""


def parsed(text: str = MATRIX) -> matrix_mod.Matrix:
    return matrix_mod.parse(text, Path("m.yaml"))


def test_run_image_runs_the_matrixs_workload() -> None:
    m = parsed()
    (cell,) = with_image(m, "debian-torch:2.1", None).cells()
    assert cell.workload is not None and cell.workload.digest == m.cells()[0].workload.digest
    assert cell.params == {"batch_size": 8}


@pytest.mark.parametrize("template", [None, "box"])
def test_bisect_images_run_the_matrixs_workload(template: str | None) -> None:
    m = parsed()
    b = plan(m, images=["debian-torch:{1..3}"], template=template)
    assert len(b.cells) == 3 and all(c.workload is not None for c in b.cells)
    assert {c.workload.digest for c in b.cells} == {m.cells()[0].workload.digest}
    assert {c.workload.digest for c in b.matrix.cells()} == {m.cells()[0].workload.digest}


def test_an_image_is_refused_where_environments_run_different_workloads() -> None:
    text = MATRIX.replace('- {name: box, backend: docker, image: "debian-torch:1.13"}',
                          '- {name: box, backend: docker, image: "debian-torch:1.13", workload: {argv: ["{python}", '
                          '"other.py", "{batch_size}"]}}')
    m = parsed(text)
    with pytest.raises(ConfigError) as e:
        with_image(m, "debian-torch:2.1", None)
    assert "\n" not in str(e.value) and str(e.value).startswith("--image: the environments of this matrix run "
                                                                "different workloads (box, host)")
    with pytest.raises(ConfigError, match="--template ENVIRONMENT"):
        plan(m, images=["debian-torch:{1..2}"])
    b = plan(m, images=["debian-torch:{1..2}"], template="box")  # the template says which
    assert all(c.workload is not None and c.workload.argv[1] == "other.py" for c in b.cells)


def test_a_bench_matrix_still_runs_bench_in_an_image() -> None:
    m = parsed("environments: [{name: host, backend: local}]\naxes: {model: [mlp], batch_size: [8]}\n")
    assert all(c.workload is None for c in with_image(m, "img:1", None).cells())


def test_a_reference_may_name_the_workloads_own_axes() -> None:
    text = MATRIX.replace("axes: {batch_size: [8]}", "axes: {batch_size: [8], block_size: [64, 128]}") + \
        "references:\n  - {match: {block_size: 64}, throughput: '>= 100'}\n"
    m = parsed(text)
    (ref,) = m.references
    assert [c.params["block_size"] for c in m.cells() if ref.matches(c)] == [64, 64]
    with pytest.raises(ConfigError, match="matches no cell"):
        parsed(text.replace("block_size: 64}", "block_size: 65}"))


DIFFERING = """
name: wl-diff
environments:
  - {name: a, backend: local, env: {TORCH_SHOW_CPP_STACKTRACES: "0"}}
  - name: b
    backend: local
    env: {TORCH_SHOW_CPP_STACKTRACES: "1"}
    workload: {argv: ["{python}", "-c", "print('speed 500 img/s')", "--fast", "{batch_size}"]}
workload:
  argv: ["{python}", "-c", "print('speed 500 img/s')", "{batch_size}"]
  parser: {kind: pattern, figures: {throughput: {regex: 'speed ([0-9]+)', unit: img/s}}}
axes: {batch_size: [8]}
run: {repeats: 1, timeout: 120}
"""


def test_diff_of_workload_environments_names_their_command_and_steering_variables(tmp_path: Path) -> None:
    from tests.backends.workloads.conftest import cli as run_cli

    (tmp_path / "m.yaml").write_text(DIFFERING)
    done = run_cli("run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    diff = run_cli("diff", "a", "b", "--db", "r.db", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    assert "Nothing recorded differs" not in diff.stdout
    assert "TORCH_SHOW_CPP_STACKTRACES" in diff.stdout and "program's command" in diff.stdout, diff.stdout


def test_a_huge_image_range_is_refused_before_it_is_made() -> None:
    import time

    from runner.bisect.envs import expand_pattern

    started = time.monotonic()
    with pytest.raises(ConfigError, match="1000000000 images, more than"):
        expand_pattern("img:{1..1000000000}")
    with pytest.raises(ConfigError, match="images, more than"):
        expand_pattern("img:{1000.01..9999.01}")
    assert time.monotonic() - started < 1
