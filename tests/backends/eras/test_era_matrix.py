"""`matrix run` across three PyTorch eras (1.0, 1.7, 1.13) and `matrix compare` of the oldest
against the newest, as a user runs them: real engine, real old releases."""

from __future__ import annotations

from pathlib import Path

import pytest
from recipes import Recipe

from tests.backends.docker.dockertools import cli, rows, write_matrix

pytestmark = pytest.mark.docker


def env_line(name: str, recipe: Recipe) -> str:
    return (f'{{name: {name}, backend: docker, image: "{recipe.tag}", tags: [era-{recipe.era}], '
            'env: {OMP_NUM_THREADS: "1"}}')


def test_three_eras_run_and_compare(tmp_path: Path, image_2018: Recipe, image_2020: Recipe,
                                    image_2022: Recipe) -> None:
    m = write_matrix(tmp_path / "eras.yaml", f"""
        name: three-eras
        environments:
          - {env_line("torch-1.0", image_2018)}
          - {env_line("torch-1.7", image_2020)}
          - {env_line("torch-1.13", image_2022)}
        axes: {{model: [mnist_cnn], precision: [fp32, amp-bf16], batch_size: [16], device: [cpu], threads: [1]}}
        run: {{iterations: 4, warmup: 1, repeats: 2, timeout: 300}}
        """)
    out = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path, timeout=900)
    stored = rows(tmp_path / "r.db")
    assert len(stored) == 12, out.stdout + out.stderr
    by = {(r["environment"], r["params"]["precision"]): r for r in stored}
    recipes = {"torch-1.0": image_2018, "torch-1.7": image_2020, "torch-1.13": image_2022}
    for env, recipe in recipes.items():
        fp32 = by[(env, "fp32")]
        assert fp32["status"] == "ok" and fp32["env"]["torch"].startswith(recipe.torch), fp32["env"]["torch"]
        assert fp32["metrics"]["throughput"] > 0
    # The era labels of an image built by images/build.py travel with its results (the shared
    # 1.13 test image may have been built before it had labels).
    for env in ("torch-1.0", "torch-1.7"):
        labels = by[(env, "fp32")]["env"]["image_labels"]
        assert labels["matrix.era"] == recipes[env].era and labels["matrix.era.date"] == recipes[env].date
    # What each era lacks is a stored reason, not a failure: 1.0 has no bfloat16 at all, 1.7 has
    # the dtype but no CPU autocast; 1.13 runs it.
    assert by[("torch-1.0", "amp-bf16")]["status"] == "unsupported"
    assert "no bfloat16 dtype" in by[("torch-1.0", "amp-bf16")]["reason"]
    assert by[("torch-1.7", "amp-bf16")]["status"] == "unsupported"
    assert "no bf16 autocast for cpu" in by[("torch-1.7", "amp-bf16")]["reason"]
    assert by[("torch-1.13", "amp-bf16")]["status"] == "ok"
    assert not [r for r in stored if r["status"] not in ("ok", "unsupported")]

    cmp = cli("compare", "torch-1.0", "torch-1.13", "--db", "r.db", "--format", "md", cwd=tmp_path)
    text = cmp.stdout
    print(text)
    assert "torch-1.0" in text and "torch-1.13" in text and "mnist_cnn" in text, text
    # amp-bf16 ran on one side only: compare names it rather than pairing it.
    assert "amp-bf16" in text, text
