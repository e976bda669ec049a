"""The GPU evidence kit: its plan checked against what the GPU issue lists, and the whole kit in a dry run on
this CPU (tiny sizes, the same code path: calibration, matrix run per repeat, the reference loop, the report,
the pack), resumed, and stopped by its budget."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from runner import matrix
from runner.contract import PRECISIONS
from runner.kit import evidence, plan, tables
from runner.store import Store
from tests.conftest import ROOT

KIT = ROOT / "scripts" / "gpu_evidence.py"


def kit(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(KIT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


# --- the plan --------------------------------------------------------------------------------------------

def phases(**kw: Any) -> dict[str, plan.Phase]:
    return {p.name: p for p in plan.build(data_dir="results/x", **kw)}


def test_the_plan_is_what_the_gpu_issue_lists() -> None:
    ph = phases()
    main = ph["resnet50"].cells
    assert {(c["precision"], c["channels_last"]) for c in main} == {(p, cl) for p in PRECISIONS for cl in (False, True)}
    assert all(c["model"] == "resnet50" and c["batch_size"] == 256 and c["cudnn_benchmark"] and
               c["dataset"] == "synthetic" for c in main)
    assert ph["resnet50"].repeats == 5
    ref = ph["reference"].cells[0]
    assert ph["reference"].reference and plan.cell_id(ref) in {plan.cell_id(c) for c in main}
    assert all(c["amp_impl"] == "manual" and c["loss_scale"] == 256.0 for c in ph["recipe-2018"].cells)
    vgg = ph["vgg16-cifar"].cells
    assert {(c["precision"], c["batch_size"]) for c in vgg} == {
        (p, b) for p in ("fp32", "fp16", "amp") for b in (128, 256, 512, 1024, 2048)}
    ngc = ph["resnet-ngc-2018"].cells
    assert len(ngc) == 6 and all(c["batch_size"] == 128 for c in ngc)
    wrn = ph["wrn-apex-levels"]
    assert {(lab["opt_level"], c["workers"]) for c, lab in zip(wrn.cells, wrn.labels, strict=True)} == {
        (lv, w) for lv in ("O0", "O1", "O2", "O3") for w in (0, 2, 4, 8)}
    assert all(c["model"] == "wrn" and c["wrn_depth"] == 28 and c["wrn_width"] == 10 and
               c["dataset"].startswith("imagefolder:") for c in wrn.cells)
    assert {c["batch_size"] for c in ph["resnet50-breakdown"].cells} == {64, 128, 256, 512}
    assert all(c["breakdown"] and c["precision"] == "amp" for c in ph["resnet50-breakdown"].cells)
    mnist = ph["mnist-tensor-cores"].cells
    assert [(c["precision"], c["batch_size"]) for c in mnist] == [("fp32", 512), ("amp", 512), ("amp", 1024)]
    assert {p.writeup for p in ph.values() if p.writeup} <= set(tables.published())


@pytest.mark.parametrize("dry", [False, True])
def test_every_cell_is_a_valid_matrix(dry: bool, tmp_path: Path) -> None:
    """Each cell as the kit writes it passes `matrix plan`'s checks (the bench's own argument rules)."""
    args = evidence.options(["--state", str(tmp_path), *(["--dry-run"] if dry else [])])
    k = evidence.Kit(args)
    for c in k.cells:
        c.iterations, c.warmup, c.t_iter = 10, 2, 0.1
        cells = matrix.parse(k.matrix_text(c, 3), tmp_path / "m.yaml").cells()
        assert len(cells) == 1 and cells[0].params["device"] == ("cpu" if dry else "cuda")


def test_published_numbers_give_the_write_ups_own_ratios() -> None:
    pub = tables.published()
    ngc = pub["ngc-vs-slurm"]["img_s"]
    assert round(ngc["container"]["resnet50"]["fp16"] / ngc["container"]["resnet50"]["fp32"], 2) == 2.02
    assert round(ngc["slurm"]["resnet18"]["fp16"] / ngc["slurm"]["resnet18"]["fp32"], 2) == 1.01
    assert round(ngc["container"]["resnet18"]["fp32"] / ngc["slurm"]["resnet18"]["fp32"], 2) == 4.02
    thr = pub["resnet50-throughput"]["one_node"]
    assert [r["speedup"] for r in thr] == [round(r["overall"] / thr[0]["overall"], 2) for r in thr]
    v100 = pub["apex-vgg16-cifar"]["time_s_per_100_iterations"]["V100"]
    assert len(v100["amp"]) == len(pub["apex-vgg16-cifar"]["batches"]) == 5
    assert pub["wrn-apex-t4-p100"]["time_s"]["T4"]["O1"] == 31 * 60 + 14


# --- sizing --------------------------------------------------------------------------------------------

def test_calibration_sizes_the_window(tmp_path: Path) -> None:
    k = evidence.Kit(evidence.options(["--state", str(tmp_path), "--window", "2"]))
    d = k._decide({"status": "ok", "t_iter": 0.085})
    assert d["iterations"] * 0.085 >= 2.0 and d["iterations"] == math.ceil(2.0 * 1.2 / 0.085)
    assert d["warmup"] * 0.085 >= 1.0
    slow = k._decide({"status": "ok", "t_iter": 3.0})
    assert slow["iterations"] == evidence.MIN_ITERATIONS["cuda"]
    none = k._decide({"status": "unsupported", "t_iter": None, "reason": "no"})
    assert none["iterations"] == evidence.MIN_ITERATIONS["cuda"] and none["warmup"] == 1


def test_a_short_first_window_resizes_the_cell_once(tmp_path: Path) -> None:
    k = evidence.Kit(evidence.options(["--state", str(tmp_path), "--window", "2", "--only", "mnist-tensor-cores"]))
    tmp_path.mkdir(exist_ok=True)
    for c in k.cells:
        k.decided[c.id] = {"iterations": 20, "warmup": 5, "t_iter": 0.1, "status": "ok"}
        c.iterations, c.warmup, c.t_iter = 20, 5, 0.1
    k.write_matrices()
    c = k.cells[0]
    old_key = c.key
    k.resize(c, {"window_s": 1.0})  # 20 iterations took 1 s, not 2
    assert c.iterations == math.ceil(2 * 1.2 / 0.05) and c.key != old_key
    assert k.decided[c.id]["resized_from"] == 20
    k.resize(c, {"window_s": 0.5})
    assert c.iterations == math.ceil(2 * 1.2 / 0.05)  # once only
    k.resize(k.cells[1], {"window_s": 2.5})
    assert k.cells[1].iterations == 20  # long enough: unchanged


# --- the kit on this CPU -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dry(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("kit")
    state, out, pack = base / "state", base / "report", base / "state.tgz"
    first = kit("--dry-run", "--state", str(state), "--out", str(out), "--pack", str(pack))
    return {"state": state, "out": out, "pack": pack, "first": first}


def test_dry_run_runs_every_phase_and_writes_the_report(dry: dict[str, Any]) -> None:
    run = dry["first"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "complete: every repeat of the plan is stored" in run.stdout
    page = (dry["out"] / "README.md").read_text()
    for heading in ("# GPU evidence", "## Where the time went", "## ResNet-50, batch 4",
                    "**The hand-written loop**", "## The 2018 recipe beside native autocast",
                    "## Write-up: ResNet-50 throughput", "## Write-up: NGC 18.07 container vs bare-metal Slurm",
                    "## Write-up: apex on CIFAR-10, VGG16", "## Write-up: Tensor Cores with PyTorch",
                    "## Write-up: Wide-ResNet with apex O0-O3", "## Not measured"):
        assert heading in page, heading
    assert "published (K80)" in page and "57min 17s" in page  # the published numbers beside today's
    doc = json.loads((dry["out"] / "evidence.json").read_text())
    assert doc["kind"] == "matrix-gpu-evidence" and doc["dry_run"] is True
    assert doc["reference"]["ratio"] > 0 and doc["time"]["window_share"] > 0
    assert (dry["out"] / "matrix" / "report.json").exists() and (dry["out"] / "matrix" / "report.html").exists()


def test_dry_run_stores_every_repeat_with_its_status(dry: dict[str, Any]) -> None:
    with Store(dry["state"] / "store.db", readonly=True) as store:
        rows = list(store.rows())
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    assert by_status.get("ok", 0) >= 8, by_status
    reasons = {r["reason"] for r in rows if r["status"] == "unsupported"}
    assert any("amp (FP16 mixed precision) is not supported on CPU" in (x or "") for x in reasons)  # 2018 recipe
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(r["metrics"]["telemetry"]["source"] is None for r in ok)  # a CPU: said, not sampled
    assert set(r["status"] for r in rows) <= {"ok", "unsupported"}


def test_dry_run_packs_what_the_next_call_needs(dry: dict[str, Any]) -> None:
    with tarfile.open(dry["pack"]) as tar:
        names = tar.getnames()
    assert any(n.endswith("state/store.db") for n in names) and any(n.endswith("state/cells.json") for n in names)
    assert any(n.endswith("report/README.md") for n in names)
    assert not any("/cache/" in n or n.endswith(("-wal", "-shm")) for n in names)
    assert dry["pack"].stat().st_size < 4 * 2**20


def test_a_second_call_measures_nothing_again(dry: dict[str, Any]) -> None:
    with Store(dry["state"] / "store.db", readonly=True) as store:
        before = len(list(store.rows(latest_only=False)))
    again = kit("--dry-run", "--state", str(dry["state"]), "--out", str(dry["out"]), "--no-report")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "plan: 0 repeats to run" in again.stdout and "calibrating" not in again.stdout
    with Store(dry["state"] / "store.db", readonly=True) as store:
        assert len(list(store.rows(latest_only=False))) == before


def test_the_budget_stops_the_kit_and_says_what_is_left(tmp_path: Path) -> None:
    run = kit("--dry-run", "--state", str(tmp_path / "s"), "--out", str(tmp_path / "r"), "--only", "recipe-2018",
              "--budget", "2", "--reserve", "0", "--pack", str(tmp_path / "p.tgz"), timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "NOT complete: 1 repeats left" in run.stdout and "run the same command again" in run.stdout
    assert (tmp_path / "p.tgz").exists()


def test_the_deadline_stops_the_repeat_in_flight(tmp_path: Path) -> None:
    """A repeat still running when the budget ends is stopped and stored cancelled (it runs next call)."""
    k = evidence.Kit(evidence.options(["--dry-run", "--state", str(tmp_path), "--only", "resnet50"]))
    tmp_path.mkdir(exist_ok=True)
    c = k.cells[0]
    c.iterations, c.warmup, c.t_iter = 10_000_000, 1, 0.001
    c.path = tmp_path / "long.yaml"
    c.path.write_text(k.matrix_text(c, 1))
    c.key = matrix.load(c.path).cells()[0].key
    code = k._matrix_run(c.path, 4.0)
    assert code == 130 and k.stopped == "budget"
    assert k.stored()[(c.key, 0)] == "cancelled"
    assert k.missing() and k.missing()[0][0] is c  # it is run again next call


@pytest.mark.gpu
def test_the_kit_on_a_real_gpu(tmp_path: Path) -> None:
    """One small phase on the GPU: calibrated windows of at least the seconds asked, telemetry, the page."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here (CI machines have none; run on a GPU host with `pytest -m gpu`)")
    run = kit("--state", str(tmp_path / "s"), "--out", str(tmp_path / "r"), "--only", "mnist-tensor-cores",
              "--writeup-repeats", "2", "--window", "0.5", timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    keys = {matrix.load(p).cells()[0].key for p in (tmp_path / "s" / "matrices").glob("*.yaml")}
    with Store(tmp_path / "s" / "store.db", readonly=True) as store:
        ok = [r for r in store.rows() if r["status"] == "ok" and r["cell_key"] in keys]  # a resized cell's newest
    assert len(ok) == 6
    assert all(r["metrics"]["window_s"] >= 0.5 * evidence.RESIZE_BELOW for r in ok)
    assert all(r["metrics"]["telemetry"]["source"] in ("nvml", "nvidia-smi") for r in ok)
    page = (tmp_path / "r" / "README.md").read_text()
    assert "Write-up: Tensor Cores with PyTorch" in page and "tensor cores" in page
