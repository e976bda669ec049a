"""The GPU evidence kit: its plan checked against what the GPU issue lists, and the whole kit in a dry run on
this CPU (tiny sizes, the same code path: calibration, matrix run per repeat, the reference loop, the report,
the pack), resumed, and stopped by its budget."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner import analysis, matrix
from runner.base.errors import StoreError
from runner.domain.bench_contract import PRECISIONS
from runner.kit import device as kit_device
from runner.kit import evidence, evidence_page, headline, output, plan, reference
from runner.store import Store
from tests.conftest import ROOT

KIT = ROOT / "scripts" / "gpu_evidence.py"
GOALS = ("gpu-tests", "goal-headline", "reference", "goal-gpt2", "goal-resnet50")  # the first call


def kit(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(KIT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


# --- the plan --------------------------------------------------------------------------------------------

def phases(**kw: Any) -> dict[str, plan.Phase]:
    return {p.name: p for p in plan.build(data_dir="results/x", **kw)}


def test_the_plan_is_what_the_gpu_issue_lists() -> None:
    ph = phases()
    main = ph["resnet50"].cells
    assert {(c["precision"], c["channels_last"]) for c in main} == {
        (p, cl) for p in PRECISIONS if p != "fp8" for cl in (False, True)}
    assert all(c["model"] == "resnet50" and c["batch_size"] == 256 and c["cudnn_benchmark"] and
               c["dataset"] == "synthetic" for c in main)
    plain, *fast = ph["headline"].cells
    assert plain["precision"] == "amp" and plain["channels_last"] and ph["headline"].repeats == 3
    assert fast and all(c["model"] == "resnet50" and c["batch_size"] == 256 for c in fast)
    ref = ph["reference"].cells[0]
    assert ph["reference"].reference and plan.cell_id(ref) == plan.cell_id(plain)
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
    assert {p.writeup for p in ph.values() if p.writeup} <= set(evidence_page.published())


@pytest.mark.parametrize("dry", [False, True])
def test_no_image_phase_gets_an_fp8_cell(dry: bool) -> None:
    """The ResNet-50 grid looped over the project's precisions, which gained fp8 (a transformer's precision: FP8
    training converts linear layers, a ResNet's convolutions stay BF16): 14 cells, two of them fp8."""
    for ph in plan.build(dry=dry, data_dir="x"):
        if ph.name in ("gpt2-first", "gpt2-124m", "more-repeats", "fp8-by-size"):
            continue
        assert not [c for c in ph.cells if c.get("precision") == "fp8"], ph.name
    assert len(phases()["resnet50"].cells) == 2 * len(plan.IMAGE_PRECISIONS) == 12


def test_the_gpt2_phase_is_bf16_beside_fp8_after_the_headline() -> None:
    ph = phases()
    gpt = ph["gpt2-124m"]
    assert all(c["model"] == "gpt2_124m" and c["seq_len"] == 1024 and c["batch_size"] == 32 and c["compile"] and
               c["attention"] == "auto" and c["dataset"] == "synthetic" and c["device"] == "cuda" for c in gpt.cells)
    assert [(c["precision"], c.get("fp8_impl"), c.get("fp8_recipe")) for c in gpt.cells] == [
        ("bf16", None, None), ("amp-bf16", None, None), ("fp8", "torchao", "tensorwise"), ("fp8", "torchao", "rowwise")]
    assert gpt.repeats == 2  # the fewest that give FP8 over BF16 a p-value; more-repeats adds the third
    assert {plan.cell_id(c) for c in gpt.cells} <= {plan.cell_id(c) for c in ph["more-repeats"].cells}
    small = phases(dry=True)["gpt2-124m"]
    assert {c["model"] for c in small.cells} == {"gpt_tiny"} and not any(c["compile"] for c in small.cells)
    assert {c["precision"] for c in small.cells} == {"bf16", "fp8"}


def test_the_gpt2_cells_warm_up_up_to_180_s_and_measure_windows_of_10_s(tmp_path: Path) -> None:
    k = evidence.Kit(evidence.options(["--state", str(tmp_path)]))
    for c in (c for c in k.cells if not c.phase.tests):  # the GPU tests are pytest's step, not a matrix
        run = matrix.parse(k.matrix_text(c, 2), tmp_path / "m.yaml").cells()[0].run
        doc = yaml.safe_load(k.matrix_text(c, 2))["run"]
        if c.params["model"] in plan.LIMITS:  # every GPT-2 size: its own warm-up ceiling, windows of 5 s or more
            assert doc["warmup"]["max_time"] == plan.LIMITS[c.params["model"]][1] >= 180.0, doc
            assert doc["iterations"]["min_time"] >= 5.0, doc
        else:
            assert doc["iterations"]["min_time"] < 5.0, doc
        assert run.calibrated
    gpt = next(c for c in k.cells if c.params.get("model") == "gpt2_124m")
    assert k.repeat_estimate(gpt, 1) < k.repeat_estimate(gpt, 0) <= 12 + 180 + 6  # later: warm compile caches


def test_the_goals_come_first_then_the_headline_the_levers_the_recipe_each_grid_once_fp8_and_more_repeats() -> None:
    """A lease holds one call: the first answers the goals (the GPU tests, the headline's plain and fastest rows, the
    hand-written loop, GPT-2's and ResNet-50's fastest lever sets); then the headline's other rows and repeats, each
    lever's gain, GPT-2's BF16 beside FP8 (one repeat each), the recipe, every grid once, GPT-2, FP8 by size (its goal
    at 1.5B) and the grids' other repeats last."""
    order = [p.name for p in plan.build(data_dir="x")]
    assert order[:10] == [*GOALS, "headline", "resnet50-fastest", "gpt2-levers", "gpt2-first", "recipe-2018"]
    assert order[-3:] == ["gpt2-124m", "fp8-by-size", "more-repeats"]
    grids = phases()
    first = grids["gpt2-first"]
    assert first.repeats == 1 and [(c["precision"], c.get("fp8_recipe")) for c in first.cells] == [
        ("bf16", None), ("fp8", "tensorwise")]
    order = order[order.index("recipe-2018"):-3]
    assert all(grids[n].repeats == 1 for n in order[1:])
    more = grids["more-repeats"]
    assert more.first_repeat == 1 and list(more.wanted()) == [1, 2]
    assert {plan.cell_id(c) for c in more.cells} == {plan.cell_id(c) for n in ["gpt2-124m", *order[1:]]
                                                     for c in grids[n].cells}
    assert "more-repeats" not in phases(repeats=1)


def test_the_first_call_holds_the_goals_and_leaves_gpt2_first_saying_why(tmp_path: Path) -> None:
    """`--plan` cuts the repeats into calls of 9 minutes of measuring by the costs logged on an H100 (a ResNet-50
    repeat 16-18 s, 31-39 s a cell's first; compiled 78 s first; GPT-2 compiled 52 s at BF16, 87 s at FP8; the loop
    ~19.75 s a process): the first holds the goals' rows at two repeats within its 540 s; GPT-2's BF16-beside-FP8 pair
    goes to a later call, and the plan says why."""
    run = kit("--plan", "--state", str(tmp_path / "s"), timeout=120)
    assert run.returncode == 0, run.stderr
    (line,) = [ln for ln in run.stdout.splitlines() if "] call 1 measures " in ln]
    assert "goal-headline 4 repeats" in line and "reference 2 repeats" in line and "gpt2-first" not in line, line
    used = int(line.split(": ~")[-1].split(" s of its")[0])
    assert used <= plan.CALL_MEASURE_S and "of its 540 s" in line, line
    (left,) = [ln for ln in run.stdout.splitlines() if "] call 1 leaves gpt2-first" in ln]
    assert "gpt2-first (2 repeats" in left and "measured whole or not at all" in left, left


def test_resnet50_fastest_is_the_static_fp16_graph_under_max_autotune_beside_the_headlines_fastest() -> None:
    ph = phases()
    cells = ph["resnet50-fastest"].cells
    assert plan.cell_id(cells[0]) == plan.cell_id(ph["headline"].cells[-1])  # the headline's fastest, not run again
    assert all(c["model"] == "resnet50" and c["cuda_graphs"] and c["optimizer_impl"] == "fused" and c["compile"]
               and c["channels_last"] for c in cells)
    static = [c for c in cells if c["precision"] == "amp"]
    assert [(c["batch_size"], c["compile_mode"]) for c in static] == [(256, "default"), (256, "max-autotune"),
                                                                       (512, "max-autotune")]
    assert all(c["loss_scale"] == 256.0 for c in static)
    assert [(c["precision"], c["compile_mode"]) for c in cells[:2]] == [("amp-bf16", "default"),
                                                                         ("amp-bf16", "max-autotune")]
    assert ph["resnet50-fastest"].repeats == 2


def test_gpt2_levers_add_one_lever_a_row_from_the_gpt2_phases_cell() -> None:
    ph = phases()
    cells = ph["gpt2-levers"].cells
    amp = next(c for c in ph["gpt2-124m"].cells if c["precision"] == "amp-bf16")
    assert plan.cell_id(cells[0]) == plan.cell_id(amp)
    steps = [{k: v for k, v in b.items() if a.get(k) != v} for a, b in zip(cells, cells[1:], strict=False)]
    assert steps == [{"optimizer": "adamw", "optimizer_impl": "fused"}, {"loss_impl": "chunked"},
                     {"attention": "flash"}, {"cuda_graphs": True}, {"attention": "cudnn"}]
    assert all(c["model"] == "gpt2_124m" and c["compile"] and c["precision"] == "amp-bf16" for c in cells)


def test_fp8_by_size_fits_80_gb_and_shares_124ms_cells() -> None:
    ph = phases()
    cells = ph["fp8-by-size"].cells
    sizes = {(c["model"], c["batch_size"], bool(c.get("checkpoint"))) for c in cells}
    assert sizes == {("gpt2_124m", 32, False), ("gpt2_350m", 32, False), ("gpt2_774m", 16, False),
                     ("gpt2_1558m", 16, True)}
    for model in ("gpt2_124m", "gpt2_350m", "gpt2_774m", "gpt2_1558m"):
        assert {(c["precision"], c.get("fp8_recipe")) for c in cells if c["model"] == model} == {
            ("bf16", None), ("amp-bf16", None), ("fp8", "tensorwise"), ("fp8", "rowwise")}
    assert all(c["compile"] and c["seq_len"] == 1024 for c in cells)
    assert {plan.cell_id(c) for c in ph["gpt2-124m"].cells} == {plan.cell_id(c) for c in cells if c["model"] == "gpt2_124m"}
    small = phases(dry=True)["fp8-by-size"].cells
    assert {c["model"] for c in small} == {"gpt_tiny", "gpt_small"} and any(c.get("checkpoint") for c in small)


def test_the_later_phases_costs_are_estimates_scaled_from_124m() -> None:
    """Not measured yet: the larger GPT-2s compile for 124M's seconds times their layers over 12; max-autotune for 3x
    the default's; each repeat still fits a call's 540 s."""
    gpt = {"model": "gpt2_124m", "precision": "fp8", "device": "cuda", "compile": True}
    for model, layers in (("gpt2_350m", 24), ("gpt2_774m", 36), ("gpt2_1558m", 48)):
        fp8 = plan.COMPILE_MODEL_S["gpt2_124m"][1]
        assert plan.compile_seconds({**gpt, "model": model}, False) == pytest.approx(fp8 * layers / 12, rel=0.01)
    rn = {"model": "resnet50", "precision": "amp", "device": "cuda", "compile": True}
    assert plan.compile_seconds({**rn, "compile_mode": "max-autotune"}, False) == 3 * plan.compile_seconds(rn, False)
    for phase in plan.build(data_dir="x"):
        for c in phase.cells:
            assert plan.guess_seconds(c, 2.0, 3.0) < plan.CALL_MEASURE_S, c


def test_the_plan_model_is_the_measured_costs() -> None:
    """guess_seconds reproduces what the H100 measured: a ResNet-50 eager repeat 16-20 s (31-39 s a cell's first),
    a compiled one 78 s the first time, GPT-2 124M compiled 49-52 s at BF16 and 87 s at FP8 (5-s windows)."""
    rn = {"model": "resnet50", "precision": "amp", "batch_size": 256, "device": "cuda"}
    assert 16 <= plan.guess_seconds(rn, 2.0, 3.0, later=True) <= 20
    assert 31 <= plan.guess_seconds(rn, 2.0, 3.0) <= 39
    assert 74 <= plan.guess_seconds({**rn, "compile": True}, 2.0, 3.0) <= 82
    gpt = {"model": "gpt2_124m", "precision": "bf16", "device": "cuda", "compile": True}
    assert 44 <= plan.guess_seconds(gpt, 2.0, 3.0) <= 56
    assert 80 <= plan.guess_seconds({**gpt, "precision": "fp8"}, 2.0, 3.0) <= 92


def test_the_goals_then_the_headline_and_every_grid_at_one_repeat_fit_about_100_minutes_in_nine_calls(
        tmp_path: Path) -> None:
    """`--plan` prints each phase's device minutes in order; by its model (plan.guess_seconds, CALL_START_S a
    call), the goals' call, the levers' phases and then the headline and every grid at one repeat fit nine calls and
    about 100 minutes of an H100; GPT-2, FP8 by size and the other repeats come after them."""
    run = kit("--plan", "--state", str(tmp_path / "s"), timeout=120)
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in run.stdout.splitlines() if "] phase " in ln]
    names = [ln.split("] phase ")[1].split()[1].rstrip(":") for ln in lines]
    assert names == [p.name for p in plan.build(data_dir="x")]
    assert all("device min" in ln and "min of lease in" in ln for ln in lines)
    gpt2_line = names.index("gpt2-124m")
    last_grid = lines[gpt2_line - 1]  # the line before GPT-2's: the lease so far
    assert names[gpt2_line + 1:] == ["fp8-by-size", "more-repeats"]
    minutes = int(last_grid.split("(so far ~")[1].split(" min")[0])
    calls = int(last_grid.split("min of lease in ")[1].split(" calls")[0])
    assert minutes <= 100 and calls <= 9, last_grid  # 97 min by the costs the first H100 run logged
    assert "plan: " in run.stdout and "min of lease" in run.stdout.splitlines()[-1]
    assert not (tmp_path / "s" / "store.db").exists()


@pytest.mark.parametrize("dry", [False, True])
def test_every_cell_is_a_valid_matrix(dry: bool, tmp_path: Path) -> None:
    """Each cell as the kit writes it passes `matrix plan`'s checks (the bench's own argument rules)."""
    args = evidence.options(["--state", str(tmp_path), *(["--dry-run"] if dry else [])])
    k = evidence.Kit(args)
    for c in (c for c in k.cells if not c.phase.tests):  # the GPU tests are pytest's step, not a matrix
        cells = matrix.parse(k.matrix_text(c, 3), tmp_path / "m.yaml").cells()
        assert len(cells) == 1 and cells[0].params["device"] == ("cpu" if dry else "cuda")
        assert cells[0].run.calibrated  # its first repeat sizes its window, in its own process


def test_published_numbers_give_the_write_ups_own_ratios() -> None:
    pub = evidence_page.published()
    ngc = pub["ngc-vs-slurm"]["img_s"]
    assert round(ngc["container"]["resnet50"]["fp16"] / ngc["container"]["resnet50"]["fp32"], 2) == 2.02
    assert round(ngc["slurm"]["resnet18"]["fp16"] / ngc["slurm"]["resnet18"]["fp32"], 2) == 1.01
    assert round(ngc["container"]["resnet18"]["fp32"] / ngc["slurm"]["resnet18"]["fp32"], 2) == 4.02
    thr = pub["resnet50-throughput"]["one_node"]
    assert [r["speedup"] for r in thr] == [round(r["overall"] / thr[0]["overall"], 2) for r in thr]
    v100 = pub["apex-vgg16-cifar"]["time_s_per_100_iterations"]["V100"]
    assert len(v100["amp"]) == len(pub["apex-vgg16-cifar"]["batches"]) == 5
    assert pub["wrn-apex-t4-p100"]["time_s"]["T4"]["O1"] == 31 * 60 + 14


# --- the kit on this CPU -----------------------------------------------------------------------------------

def kit_in(work: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(KIT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=work)


def repeats_in(db: Path, final: tuple[str, ...] = ("ok", "unsupported", "failed", "oom")) -> list[tuple[str, int]]:
    """(cell key, repeat) of every stored row that ended (all rows, not only the newest of each)."""
    if not db.exists():
        return []
    with Store(db, readonly=True) as store:
        return [(r.cell_key, r.repeat) for r in store.rows(latest_only=False) if r.status in final]


def unpack(pack: Path, into: Path) -> None:
    into.mkdir(parents=True)
    if pack.exists():
        with tarfile.open(pack) as tar:
            tar.extractall(into, filter="data")


KILL_TRIALS = 3


def wait_for_a_new_repeat(db: Path, had: int, proc: subprocess.Popen[bytes], most: float = 120.0) -> float:
    """The moment the call stored its first repeat (whatever the machine's load): a kill after it, at a random
    delay, finds the call in the middle of its work (between repeats, in one, packing or writing the report)."""
    end = time.monotonic() + most
    while time.monotonic() < end and proc.poll() is None:
        try:
            if len(repeats_in(db)) > had:
                break
        except StoreError:  # the store is being created
            pass
        time.sleep(0.2)
    return time.monotonic()


@pytest.fixture(scope="module")
def dry(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The dry run as a lease runs it: each call on a fresh machine (a new folder holding only the last pack),
    killed with SIGKILL at a random moment, KILL_TRIALS times; then a call that completes the plan."""
    base = tmp_path_factory.mktemp("kit")
    pack = base / "state.tgz"
    rng = random.Random(int(os.environ.get("KIT_KILL_SEED", time.time_ns() % 100_000)))
    trials = []
    argv = [sys.executable, str(KIT), "--dry-run", "--state", "s", "--out", "r", "--pack", str(pack)]
    for i in range(KILL_TRIALS):
        work = base / f"call{i}"
        unpack(pack, work)
        before = repeats_in(work / "s" / "store.db")
        proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        moment = wait_for_a_new_repeat(work / "s" / "store.db", len(before), proc) + rng.uniform(0.0, 4.0)
        try:
            proc.wait(timeout=max(0.0, moment - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the kit and the repeat it runs, at once
            proc.wait()
        unpack(pack, base / f"pack{i}")  # the pack is whole: written beside, renamed over
        trials.append({"before": before, "moment": moment, "stored": repeats_in(work / "s" / "store.db"),
                       "packed": repeats_in(base / f"pack{i}" / "s" / "store.db")})
    work = base / "final"
    unpack(pack, work)
    first = kit_in(work, "--dry-run", "--state", "s", "--out", "r", "--pack", str(pack))
    return {"state": work / "s", "out": work / "r", "pack": pack, "first": first, "work": work, "trials": trials}


def test_killed_at_random_moments_and_resumed_nothing_is_lost_or_measured_twice(dry: dict[str, Any]) -> None:
    seen: list[tuple[str, int]] = []
    for t in dry["trials"]:
        assert set(t["before"]) <= set(t["packed"]), t  # what the last pack held survives the next call
        assert set(t["packed"]) <= set(t["stored"]), t
        assert len(set(t["stored"]) - set(t["packed"])) <= 1, t  # at most the repeat stored as the kill came
        seen = t["packed"]
    assert all(len(t["stored"]) > len(t["before"]) for t in dry["trials"])  # each call measured before its kill
    final = repeats_in(dry["state"] / "store.db")
    assert set(seen) <= set(final)
    assert len(final) == len(set(final)), "a repeat was measured twice"


def test_dry_run_runs_every_phase_and_writes_the_report(dry: dict[str, Any]) -> None:
    run = dry["first"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "complete: every repeat of the plan is stored" in run.stdout
    page = (dry["out"] / "README.md").read_text()
    for heading in ("# GPU evidence", "## Headline: ResNet-50 at batch 4", "## Where the time went",
                    "## ResNet-50, batch 4", "**The hand-written loop**", "## The 2018 recipe beside native autocast",
                    "## Write-up: ResNet-50 throughput", "## Write-up: NGC 18.07 container vs bare-metal Slurm",
                    "## Write-up: apex on CIFAR-10, VGG16", "## Write-up: Tensor Cores with PyTorch",
                    "## Write-up: Wide-ResNet with apex O0-O3", "## Not measured"):
        assert heading in page, heading
    assert "published (K80)" in page and "57min 17s" in page  # the published numbers beside today's
    assert page.index("## Headline") < page.index("## ResNet-50, batch 4")
    doc = json.loads((dry["out"] / "evidence.json").read_text())
    assert doc["kind"] == "matrix-gpu-evidence" and doc["dry_run"] is True
    assert doc["reference"]["ratio"] > 0 and doc["time"]["window_share"] > 0
    assert doc["headline"]["fastest"] is None  # one repeat a cell: no spread, no fastest named
    gpt = page.split("## GPT-2 124M")[1].split("\n## ")[0]
    assert "tok/s (mean ± std)" in gpt and "img/s" not in gpt and "gpt_tiny" in gpt
    assert "fp8 (tensorwise): fp8 training needs an NVIDIA GPU with FP8 tensor cores" in gpt
    assert [r["statuses"] for r in doc["gpt2"]] == ["1 ok", "1 unsupported"]
    # Issue 38's phases: every lever a CPU has runs; each one it lacks says why in one sentence.
    fastest = page.split("## ResNet-50 fastest")[1].split("\n## ")[0]
    assert "CUDA graphs need a CUDA device; this run trains on cpu" in fastest
    assert "amp (FP16 mixed precision) is not supported on CPU" in fastest and "loss_scale=256.0" in fastest
    levers = page.split("## GPT-2 124M levers")[1].split("\n## ")[0]
    assert [r["statuses"] for r in doc["gpt2-levers"]] == ["1 ok"] * 4 + ["1 unsupported"] * 2
    assert "loss_impl=chunked" in levers and "attention=flash" in levers and "optimizer=adamw" in levers
    assert "CUDA graphs need a CUDA device" in levers
    assert "the cudnn backend of scaled_dot_product_attention cannot run here (cpu" in levers
    by_size = page.split("## FP8 by size")[1].split("\n## ")[0]
    assert [(r["model"], r["params"].get("checkpoint")) for r in doc["fp8-by-size"]] == [
        ("gpt_tiny", None), ("gpt_small", True)]
    assert "fp8 training needs an NVIDIA GPU with FP8 tensor cores" in by_size and "tok/s" in by_size
    log = (dry["state"] / "kit.log").read_text()
    assert "precision=bf16: " in log and " tok/s over " in log
    assert (dry["out"] / "matrix" / "report.json").exists() and (dry["out"] / "matrix" / "report.html").exists()


def test_dry_run_stores_every_repeat_with_its_status(dry: dict[str, Any]) -> None:
    with Store(dry["state"] / "store.db", readonly=True) as store:
        rows = list(store.rows())
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    assert by_status.get("ok", 0) >= 8, by_status
    reasons = {r.reason for r in rows if r.status == "unsupported"}
    assert any("amp (FP16 mixed precision) is not supported on CPU" in (x or "") for x in reasons)  # 2018 recipe
    ok = [r for r in rows if r.status == "ok"]
    assert all(r.metrics["telemetry"]["source"] is None for r in ok)  # a CPU: said, not sampled
    assert all(r.metrics["calibration"]["iterations"] >= 2 for r in ok if r.repeat == 0)
    assert set(r.status for r in rows) <= {"ok", "unsupported"}


def test_dry_run_packs_what_the_next_call_needs(dry: dict[str, Any]) -> None:
    with tarfile.open(dry["pack"]) as tar:
        names = tar.getnames()
    assert "s/store.db" in names and "s/device.json" in names and "r/README.md" in names
    assert not any("/cache/" in n or n.endswith(("-wal", "-shm", ".tmp")) for n in names)
    assert dry["pack"].stat().st_size < 4 * 2**20


def test_a_second_call_measures_nothing_again(dry: dict[str, Any]) -> None:
    before = len(repeats_in(dry["state"] / "store.db", ("ok", "unsupported", "cancelled", "failed")))
    again = kit_in(dry["work"], "--dry-run", "--state", "s", "--out", "r", "--no-report")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "plan: 0 repeats to run" in again.stdout
    assert len(repeats_in(dry["state"] / "store.db", ("ok", "unsupported", "cancelled", "failed"))) == before


def test_only_never_shrinks_the_page_and_says_what_is_missing(dry: dict[str, Any], tmp_path: Path) -> None:
    """`--only` once rewrote the page and evidence.json with the selected phases alone (106 lines became 42)."""
    page = (dry["out"] / "README.md").read_text()
    doc = json.loads((dry["out"] / "evidence.json").read_text())
    run = kit_in(dry["work"], "--dry-run", "--state", "s", "--out", "r", "--only", "mnist-tensor-cores")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    again = (dry["out"] / "README.md").read_text()
    assert again.count("\n## ") == page.count("\n## ") and abs(len(again.splitlines()) - len(page.splitlines())) < 3
    assert set(json.loads((dry["out"] / "evidence.json").read_text())) == set(doc)
    partial = tmp_path / "w"
    partial.mkdir()
    run = kit_in(partial, "--dry-run", "--state", "s", "--out", "r", "--only", "recipe-2018", "--no-report")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "the phases asked for are stored; the plan still misses gpu-tests (1 repeats), goal-headline" in run.stdout


def test_a_state_of_one_device_refuses_another(tmp_path: Path) -> None:
    state = tmp_path / "s"
    state.mkdir()
    (state / "device.json").write_text(json.dumps({"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
                                                   "driver": "580.159.03", "cuda": "13.0"}))
    run = kit("--dry-run", "--state", str(state), "--out", str(tmp_path / "r"), timeout=120)
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("gpu_evidence: error:") and "belongs to NVIDIA H100 80GB HBM3 (81559 MiB" in line
    assert "this is cpu-dry-run" in line and "--state" in line
    assert not (state / "store.db").exists() and not run.stdout


def test_no_cuda_device_is_an_error_of_the_run_in_one_line(tmp_path: Path) -> None:
    """Without a CUDA device every cell was stored `unsupported`, the kit said complete and exited 0."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    run = kit("--state", str(tmp_path / "s"), "--out", str(tmp_path / "r"), timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("gpu_evidence: error:") and "no usable CUDA device" in line and "--dry-run" in line
    assert not (tmp_path / "s" / "store.db").exists() and not (tmp_path / "s" / "device.json").exists()


def test_the_budget_stops_the_kit_and_says_what_is_left(tmp_path: Path) -> None:
    run = kit("--dry-run", "--state", str(tmp_path / "s"), "--out", str(tmp_path / "r"), "--only", "recipe-2018",
              "--budget", "2", "--reserve", "0", "--pack", str(tmp_path / "p.tgz"), timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "NOT complete: 1 repeats left" in run.stdout and "run the same command again" in run.stdout
    assert (tmp_path / "p.tgz").exists()


def test_the_deadline_stops_the_repeat_in_flight(tmp_path: Path) -> None:
    """A repeat still running when the budget ends is stopped and stored cancelled (it runs next call)."""
    k = evidence.Kit(evidence.options(["--dry-run", "--state", str(tmp_path), "--only", "resnet50",
                                       "--window", "600"]))
    k.device = dict(kit_device.DRY_RUN)
    k.write_matrices()
    c = next(c for c in k.cells if c.phase.name == "resnet50")
    code = k._matrix_run(c.path, 4.0)  # type: ignore[arg-type]
    assert code == 130 and k.stopped == "budget"
    assert k.stored()[(c.key, 0)] == "cancelled"
    assert (c, 0) in k.missing()  # it is run again next call


def test_a_report_that_fails_is_one_line_and_the_pack_keeps_the_measurements(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The state was packed only after the report: a report that raised lost everything measured in the call."""
    def broken(*a: Any, **kw: Any) -> list[Path]:
        raise ModuleNotFoundError("No module named 'jinja2'")
    monkeypatch.setattr(evidence_page, "write", broken)
    monkeypatch.chdir(tmp_path)
    code = evidence.main(["--dry-run", "--state", "s", "--out", "r", "--only", "recipe-2018", "--pack", "p.tgz"])
    assert code == 0
    said = [ln for ln in capsys.readouterr().out.splitlines() if "report: not written" in ln]
    assert len(said) == 1 and "ModuleNotFoundError" in said[0] and "--report-only" in said[0]
    with tarfile.open(tmp_path / "p.tgz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    assert repeats_in(tmp_path / "x" / "s" / "store.db")


def test_the_timer_kills_the_reference_runs_whole_process_group(tmp_path: Path) -> None:
    """bench_vs_reference.py's own child (a benchmark on the GPU) outlived the deadline's kill."""
    pidfile = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(120)']); open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(120)")
    started = time.monotonic()
    code, _, _ = reference.run_group([sys.executable, "-c", script], 3.0, dict(os.environ))
    assert code is None and time.monotonic() - started < 30
    child = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the reference run's child outlived the deadline")


def test_the_report_folder_is_named_after_the_states_device(tmp_path: Path) -> None:
    """It was named after whichever calibrated cell sorted first, whatever device measured it."""
    k = evidence.Kit(evidence.options(["--state", str(tmp_path / "s")]))
    k.device = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "driver": "580.159.03", "cuda": "13.0"}
    assert output.out_dir(k) == Path("reports") / "nvidia-h100-80gb-hbm3"
    kit_device.bind(k.state, k.device)
    other = dict(k.device, name="NVIDIA H200")
    with pytest.raises(kit_device.DeviceError, match="--state .*s-nvidia-h200"):
        kit_device.bind(k.state, other)
    (k.state / "device.json").write_text("[1, 2]")
    with pytest.raises(kit_device.DeviceError, match="not a device record"):
        kit_device.bind(k.state, k.device)


def test_a_pack_inside_the_state_never_packs_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    k = evidence.Kit(evidence.options(["--dry-run", "--state", "s", "--out", "r", "--pack", "s/p.tgz"]))
    k.device = dict(kit_device.DRY_RUN)
    k.state.mkdir()
    (k.state / "kit.log").write_text("x")
    output.pack(k)
    output.pack(k)
    with tarfile.open(tmp_path / "s" / "p.tgz") as tar:
        assert tar.getnames() == ["s/kit.log"]


def typed(rows: list[dict[str, Any]]) -> list[analysis.Repeat]:
    """A fixture's rows as the repeats the kit reads from its store (runner.analysis: StoredRepeat, then admission)."""
    return [analysis.Repeat.of(s) for s in analysis.StoredRepeat.many(rows)]


def test_the_fastest_amp_row_needs_a_known_spread() -> None:
    """The fastest AMP row was picked from a one-repeat cell with no spread."""
    from runner.kit.cell_results import CellResult
    from runner.kit.settings import KitCell

    def result(precision: str, *values: float) -> CellResult:
        ph = plan.Phase("headline", "", (), 3)
        cell = KitCell(ph, {"precision": precision, "batch_size": 4}, {}, precision + str(len(values)))
        return CellResult(cell, typed([{"status": "ok", "metrics": {"throughput": v}} for v in values]))
    lucky, steady, fp32 = result("amp-bf16", 900.0), result("amp", 500.0, 510.0), result("fp32", 2000.0, 2010.0)
    assert headline.fastest_amp([lucky, steady, fp32]) is steady
    assert headline.fastest_amp([lucky, fp32]) is None


def test_the_gpt2_section_gives_fp8_over_bf16_with_its_p_value_in_tok_s() -> None:
    """tok/s from the results' own definitions (never img/s), FP8 over BF16 through the compare code, MFU in % of
    the peak the results name, the loss at a step every repeat kept, peak memory and the fp8 record."""
    from runner.kit import transformer
    from runner.kit.cell_results import CellResult
    from runner.kit.settings import KitCell

    tok = {"throughput": {"how": "bench: tokens", "unit": "tok/s"}}

    def result(params: dict[str, Any], *values: float, fp8: dict[str, Any] | None = None) -> CellResult:
        cell = KitCell(plan.Phase("gpt2-124m", "", (), 2), {"model": "gpt2_124m", "seq_len": 1024, "batch_size": 32,
                                                             "compile": True, "attention": "auto", **params}, {}, "x")
        rows = [{"status": "ok", "env": {"precision_flags": {"fp8": fp8}} if fp8 else {},
                 "metrics": {"throughput": v, "definitions": tok, "mfu": v / 1e6, "peak_flops": 989.4e12,
                             "peak_source": "datasheet: H100 SXM5", "peak_mem_allocated": 20 * 2**30,
                             "loss_at": {"1": 10.9, "10": 9.0 + i / 100, **({"20": 8.0} if i else {})}}}
                for i, v in enumerate(values)]
        return CellResult(cell, typed(rows))
    rec = {"library": "torchao", "version": "0.18.0", "recipe": "tensorwise", "formats": "e4m3/e5m2",
           "scaling": "dynamic", "linear_layers": 48, "fp8_layers": 48}
    bf16 = result({"precision": "bf16"}, 400_000.0, 404_000.0)
    fp8 = result({"precision": "fp8", "fp8_impl": "torchao", "fp8_recipe": "tensorwise"}, 520_000.0, 526_000.0,
                 fp8=rec)
    lone = CellResult(KitCell(plan.Phase("gpt2-124m", "", (), 2), {"precision": "fp8", "fp8_recipe": "rowwise"}, {},
                              "y"), typed([{"status": "unsupported", "reason": "fp8 training needs an NVIDIA GPU with FP8"}]))
    doc: dict[str, Any] = {}
    text = transformer.section([bf16, fp8, lone], doc)
    assert "tok/s (mean ± std)" in text and "img/s" not in text
    row = doc["gpt2"][1]
    assert row["ratio_to_bf16"] == pytest.approx(523_000 / 402_000) and row["unit"] == "tok/s"
    want = float(analysis.welch_from_stats(402_000, 2828.427, 2, 523_000, 4242.641, 2))
    assert row["p_value"] == pytest.approx(want, rel=1e-3) and row["decision"] == "fail"  # significant, > 2%
    assert " 1.30x |" in text and "loss at step 10" in text  # step 20 is not in every repeat
    assert "torchao 0.18.0, recipe tensorwise" in row["fp8"] and "48 of 48 linear layers" in text
    assert "fp8 training needs an NVIDIA GPU with FP8" in text and doc["gpt2"][2]["fp8"].startswith("fp8 training")
    assert "20480" in text and "989.4" in text  # peak memory (MiB) and the table's peak (TFLOP/s)


@pytest.mark.gpu
def test_the_kit_on_a_real_gpu(tmp_path: Path) -> None:
    """One small phase on the GPU: windows of at least the seconds asked, telemetry, the page."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here (CI machines have none; run on a GPU host with `pytest -m gpu`)")
    run = kit("--state", str(tmp_path / "s"), "--out", str(tmp_path / "r"), "--only", "mnist-tensor-cores",
              "--window", "0.5", timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    keys = {matrix.load(p).cells()[0].key for p in (tmp_path / "s" / "matrices").glob("*.yaml")}
    with Store(tmp_path / "s" / "store.db", readonly=True) as store:
        ok = [r for r in store.rows() if r.status == "ok" and r.cell_key in keys]
    assert len(ok) == 3
    assert all(r.metrics["window_s"] >= 0.5 for r in ok)
    assert all(r.metrics["telemetry"]["source"] in ("nvml", "nvidia-smi") for r in ok)
    page = (tmp_path / "r" / "README.md").read_text()
    assert "Write-up: Tensor Cores with PyTorch" in page and "tensor cores" in page


def test_the_pack_never_writes_through_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the pack's old temporary name a link is never followed (the pack is made in a private folder); at the
    pack's own name it is refused in one line, and what it names is left as it was."""
    from runner.base.safewrite import UnsafePath
    monkeypatch.chdir(tmp_path)
    k = evidence.Kit(evidence.options(["--dry-run", "--state", "s", "--out", "r", "--pack", "p.tgz"]))
    k.device = dict(kit_device.DRY_RUN)
    k.state.mkdir()
    (k.state / "kit.log").write_text("x")
    victim = tmp_path / "victim"
    victim.write_text("someone else's")
    (tmp_path / "p.tgz.tmp").symlink_to(victim)
    output.pack(k, quiet=True)
    with tarfile.open(tmp_path / "p.tgz") as tar:
        assert tar.getnames() == ["s/kit.log"]
    (tmp_path / "p.tgz").unlink()
    (tmp_path / "p.tgz").symlink_to(victim)
    with pytest.raises(UnsafePath, match="p.tgz is a symbolic link"):
        output.pack(k, quiet=True)
    (k.state / "kit.log").unlink()
    (k.state / "kit.log").symlink_to(victim)
    with pytest.raises(UnsafePath, match="kit.log is a symbolic link"):
        k.say("a line")
    assert victim.read_text() == "someone else's"


def test_the_time_section_names_the_repeats_it_did_not_admit() -> None:
    """The shortest window is an admitted one's; repeats that measured and were refused or diverged are counted
    beside it, never silently dropped (the first H100 run: 2 diverged, 2 refused for 0.32-s windows)."""
    from runner.kit.spent import window_words

    said = window_words(2.23, 2.0, {"diverged": 2, "refused": 2})
    assert said.startswith("The shortest admitted window was 2.23 s (2 s asked).")
    assert "4 measured repeats were not admitted (diverged 2, refused 2;" in said
    assert window_words(float("inf"), 2.0, {"refused": 1}).startswith("No repeat was admitted yet. 1 measured repeat was")
    assert "not admitted" not in window_words(2.5, 2.0, {})


def test_the_goals_take_the_best_admitted_row_with_a_known_spread() -> None:
    """The goals table: a goal is met only where the 95% interval of the row's mean lies at or above it (never from one
    repeat), not met where the mean is significantly below it, undecided otherwise with what would decide it; a row
    with no admitted repeat (diverged, refused) is no figure; FP8 by the interval of its ratio; the first H100 run
    beside."""
    import math

    from runner.kit import goals
    from runner.kit.cell_results import published

    pub = published()
    doc = {"headline": {"rows": [{"params": {"precision": "amp"}, "n": 0, "mean": math.nan},
                                 {"params": {"precision": "amp-bf16", "compile": True}, "n": 1, "mean": 6600.0}]},
           "resnet50-fastest": [{"params": {"precision": "amp", "loss_scale": 256}, "n": 3, "mean": 6400.0,
                                 "std": 10.0}],
           "gpt2": [{"params": {"precision": "amp-bf16"}, "n": 3, "mfu": 0.46, "mfu_std": 0.001}],
           "fp8-by-size": [{"model": "gpt2_1558m", "params": {"fp8_recipe": "rowwise"}, "ratio_to_bf16": 1.25,
                            "ratio_low": 1.1, "ratio_high": 1.4, "decision": "undecided"}]}
    text, out = goals.section(doc, pub, "NVIDIA H100 80GB HBM3")
    assert out["resnet50_img_s"]["best"] == 6400.0 and out["resnet50_img_s"]["verdict"] == "not met (98% of it)"
    assert out["gpt2_124m_mfu"]["verdict"] == "met" and "46.0% (n=3" in text
    assert out["fp8_over_bf16"]["verdict"] == "undecided: 1.25x, 95% interval 1.10-1.40x reaches across 1.2x"
    assert "5,734" in text and "35.4%" in text and "0.87x at gpt2_124m" in text and "not an H100" not in text
    doc["gpt2"][0]["mfu_std"] = 0.05  # 46% with a wide spread: its interval reaches below 45%
    _, out = goals.section(doc, pub, "NVIDIA H100 80GB HBM3")
    assert out["gpt2_124m_mfu"]["verdict"].startswith("undecided: 102% of it, 95% interval")
    assert "repeats would decide" in out["gpt2_124m_mfu"]["verdict"]
    doc["resnet50-fastest"] = []
    _, out = goals.section(doc, pub, "NVIDIA H200")
    assert out["resnet50_img_s"]["verdict"] == "undecided: reached by one repeat (at least 2 repeats needed)"
    doc["fp8-by-size"][0].update(ratio_low=1.21)
    text, out = goals.section(doc, pub, "NVIDIA H200")
    assert out["fp8_over_bf16"]["verdict"] == "met" and "not an H100" in text
    assert goals.section({}, pub, "NVIDIA H100")[1]["gpt2_124m_mfu"]["verdict"] == "not measured yet"
    # A row whose other repeats ran out of memory never meets a goal on its ok repeats alone, as `check` never passes
    # such a cell: the MFU row above met 45%; with two oom beside its three ok it is undecided, and FP8 likewise.
    doc["gpt2"][0].update(mfu_std=0.001, statuses="3 ok, 2 oom")
    doc["fp8-by-size"][0]["statuses"] = "3 ok, 1 timeout"
    _, out = goals.section(doc, pub, "NVIDIA H200")
    assert out["gpt2_124m_mfu"]["verdict"] == "undecided: its ok repeats reach it, but not every repeat ended ok (2 oom)"
    assert out["fp8_over_bf16"]["verdict"] == ("undecided: its ok repeats reach it, but not every FP8 repeat ended ok "
                                               "(1 timeout)")
