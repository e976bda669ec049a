"""From which PyTorch release the transformer runs: the tiny GPT in each era image (a missing one is built as the
other era tests build theirs: tests/backends/eras/conftest.py `era_image`). The model is written for old PyTorch (an additive causal mask, a
hand-written GELU before F.gelu, plain attention before scaled_dot_product_attention), so every era trains it;
where SDPA exists (PyTorch 2.0+) `--attention auto` runs it, and a named SDPA backend before 2.0 is
`unsupported` with its sentence."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from recipes import BY_NAME

from tests.backends.eras.eratools import EraBox

pytestmark = pytest.mark.docker

TINY = ("--model", "gpt_tiny", "--seq-len", "32", "--batch-size", "4", "--iterations", "6", "--warmup", "1",
        "--lr", "0.05")
# The releases with torch.nn.functional.scaled_dot_product_attention.
SDPA_ERAS = ("2025", "2026")


@pytest.fixture(scope="module", params=sorted(BY_NAME))
def box(request: pytest.FixtureRequest, docker_client: Any, build_era: Any) -> Iterator[EraBox]:
    recipe = build_era(request.param)
    era = EraBox(docker_client, recipe)
    yield era
    era.remove()


def test_the_tiny_transformer_trains_in_every_era(box: EraBox) -> None:
    run = box.bench("--precision", "fp32", *TINY)
    r = run.result
    assert run.code == 0 and r.get("status") == "ok", run.output[-3000:]
    m = r["metrics"]
    assert m["tokens"] == 6 * 4 * 32 and m["definitions"]["throughput"]["unit"] == "tok/s"
    assert math.isfinite(m["loss_end"]) and m["loss_end"] < m["loss_start"]
    assert m["mfu"] > 0 and m["peak_source"].startswith("measured")
    ran = r["workload"]["attention"]["ran"]
    assert ran == ("sdpa (PyTorch's choice)" if box.recipe.era in SDPA_ERAS else "plain"), (box.recipe.torch, ran)


def test_a_named_sdpa_backend_before_pytorch_2_is_unsupported(box: EraBox) -> None:
    run = box.bench("--precision", "fp32", "--attention", "math", *TINY)
    r = run.result
    if box.recipe.era in SDPA_ERAS:
        assert r["status"] == "ok" and r["workload"]["attention"]["ran"] == "sdpa math", run.output[-3000:]
    else:
        assert r["status"] == "unsupported" and run.code == 4
        assert "has no scaled_dot_product_attention (PyTorch 2.0+)" in r["reason"]


def test_fp8_in_every_era_is_unsupported_on_the_cpu(box: EraBox) -> None:
    r = box.bench("--precision", "fp8", *TINY).result
    assert r["status"] == "unsupported" and r["reason"].startswith("fp8 training needs an NVIDIA GPU")
