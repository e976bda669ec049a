"""The benchmark in real old PyTorch releases: what they can run trains, what they cannot is
`unsupported` with its reason (exit 4), never a failure or a traceback."""

from __future__ import annotations

import pytest

from tests.backends.eras.eratools import EraBox

pytestmark = pytest.mark.docker

SMALL = ("--iterations", "2", "--warmup", "0", "--batch-size", "4")


def assert_unsupported(run: object, reason: str) -> None:
    r = run.result  # type: ignore[attr-defined]
    assert r.get("status") == "unsupported", run.output  # type: ignore[attr-defined]
    assert reason in r["reason"], r["reason"]
    assert run.code == 4 and "Traceback" not in run.output, run.output  # type: ignore[attr-defined]


def test_2018_fp32_trains_and_its_loss_falls(box_2018: EraBox) -> None:
    run = box_2018.bench("--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "32",
                         "--iterations", "20", "--warmup", "2")
    r = run.result
    assert run.code == 0 and r["status"] == "ok", run.output
    assert r["env"]["torch"] == "1.0.0" and r["env"]["python"].startswith("3.6")
    assert r["env"]["torchvision"] == "0.2.1"
    m = r["metrics"]
    assert m["throughput"] > 0 and m["images"] == 20 * 32
    # 4 synthetic batches seen 5 times each: a model that learns fits them.
    assert m["loss_end"] < m["loss_start"], (m["loss_start"], m["loss_end"])


@pytest.mark.parametrize(("args", "reason"), [
    (("--model", "mnist_cnn", "--precision", "bf16"), "this torch has no bfloat16 dtype"),
    (("--model", "mnist_cnn", "--precision", "amp-bf16"), "this torch has no bfloat16 dtype"),
    (("--model", "mnist_cnn", "--precision", "fp16"), "fp16 training is not supported on CPU"),
    (("--model", "mnist_cnn", "--precision", "tf32"), "tf32 is not supported on CPU"),
    (("--model", "mnist_cnn", "--precision", "fp32", "--channels-last"),
     "this torch has no channels_last memory format"),
    (("--model", "mnist_cnn", "--precision", "fp32", "--compile"), "this torch has no torch.compile"),
    (("--model", "mobilenet_v2", "--precision", "fp32"), "model mobilenet_v2 is not in this torchvision (0.2.1)"),
    (("--model", "resnet18", "--precision", "fp32", "--image-size", "64"),
     "model resnet18 of torchvision 0.2.1 cannot take 64x64 input"),
], ids=["bf16", "amp-bf16", "fp16", "tf32", "channels-last", "compile", "model-missing", "input-size"])
def test_2018_what_pytorch_1_0_lacks_is_unsupported(box_2018: EraBox, args: tuple[str, ...], reason: str) -> None:
    assert_unsupported(box_2018.bench(*args, *SMALL), reason)


def test_2018_amp_on_cpu_says_so_without_pointing_to_a_missing_amp_bf16(box_2018: EraBox) -> None:
    run = box_2018.bench("--model", "mnist_cnn", "--precision", "amp", *SMALL)
    assert_unsupported(run, "amp (FP16 mixed precision) is not supported on CPU")
    assert "amp-bf16" not in run.result["reason"]  # PyTorch 1.0 has no bf16 autocast either


def test_2020_fp32_trains_exits_cleanly_and_has_channels_last(box_2020: EraBox) -> None:
    # Debian's PyTorch 1.7 segfaults at interpreter exit; the benchmark must exit 0 after an ok result.
    run = box_2020.bench("--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "32",
                         "--iterations", "20", "--warmup", "2", "--channels-last")
    r = run.result
    assert run.code == 0 and r["status"] == "ok", run.output
    assert "terminate called" not in run.output
    assert r["env"]["torch"].startswith("1.7") and r["env"]["python"].startswith("3.9")
    assert r["precision"]["channels_last"] is True
    assert r["metrics"]["loss_end"] < r["metrics"]["loss_start"]


@pytest.mark.parametrize(("args", "reason"), [
    # 1.7 has the bfloat16 dtype but not its CPU kernels: the operator that lacks one is named.
    (("--model", "mnist_cnn", "--precision", "bf16"), "not implemented for 'BFloat16'"),
    (("--model", "mnist_cnn", "--precision", "amp-bf16"), "this torch has no bf16 autocast for cpu"),
    (("--model", "mnist_cnn", "--precision", "fp32", "--compile"), "this torch has no torch.compile"),
], ids=["bf16-kernels", "cpu-autocast", "compile"])
def test_2020_what_pytorch_1_7_lacks_is_unsupported(box_2020: EraBox, args: tuple[str, ...], reason: str) -> None:
    assert_unsupported(box_2020.bench(*args, *SMALL), reason)


def test_2020_amp_on_cpu_names_no_missing_alternative(box_2020: EraBox) -> None:
    run = box_2020.bench("--model", "mnist_cnn", "--precision", "amp", *SMALL)
    assert_unsupported(run, "amp (FP16 mixed precision) is not supported on CPU")
    assert "amp-bf16" not in run.result["reason"]


STEADY = ("--warmup", "0", "--warmup-max", "24", "--steady-window", "3", "--window-time", "0.3", "--window-min", "2",
          "--window-max", "60")


@pytest.mark.parametrize("era", ["box_2018", "box_2020"])
def test_a_window_far_short_is_re_sized_in_old_releases(era: str, request: pytest.FixtureRequest) -> None:
    """The H100's slow start on Python 3.6 / PyTorch 1.0 and PyTorch 1.7: warm-up iterations slowed on purpose (the
    bench's seam) calibrate a window far short of the time asked; it is measured again, larger, and every step of
    every window is counted and checked."""
    box: EraBox = request.getfixturevalue(era)
    run = box.bench("--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "8", "--warmup", "3",
                    "--window-time", "0.5", "--window-min", "2", "--window-max", "100000",
                    env={"MATRIX_BENCH_SLOW_START": "3:0.2"})
    r = run.result
    assert run.code == 0 and r["status"] == "ok", run.output
    m, cal = r["metrics"], r["metrics"]["calibration"]
    assert m["slow_start"]["steps"] == 3 and "re-sized to" in run.output
    assert cal["resized"] and cal["resized"][0]["window_s"] < 0.5 and cal["met"] is True and m["window_s"] >= 0.5
    assert cal["iterations"] == m["iterations"] == r["params"]["iterations"] > cal["resized"][-1]["iterations"]
    assert m["steps"] == 3 + sum(w["iterations"] for w in cal["resized"]) + m["iterations"]
    assert m["finite"]["checked_steps"] == m["steps"] and str(m["steps"]) in m["loss_at"]


@pytest.mark.parametrize("era", ["box_2018", "box_2020"])
def test_warm_up_until_steady_calibration_and_cpu_facts_in_old_releases(era: str,
                                                                         request: pytest.FixtureRequest) -> None:
    """Python 3.6 / PyTorch 1.0 and PyTorch 1.7: the warm-up rule, the calibrated window and the CPU facts work
    where PyTorch has no get_cpu_capability (1.0 has not even torch.__config__)."""
    box: EraBox = request.getfixturevalue(era)
    run = box.bench("--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "8", *STEADY)
    r = run.result
    assert run.code == 0 and r["status"] == "ok", run.output
    m = r["metrics"]
    warm = m["warmup"]
    assert warm["how"] in ("steady", "max") and warm["iterations"] == len(warm["times"]) >= 6
    assert m["calibration"]["iterations"] == m["iterations"] == r["params"]["iterations"] >= 2
    # A window far short of the time asked (a slow or busy host) is measured again, larger: its steps count too.
    short = m["calibration"]["resized"]
    assert all(w["window_s"] < 0.3 and w["iterations"] < m["iterations"] for w in short)
    assert m["steps"] == warm["iterations"] + sum(w["iterations"] for w in short) + m["iterations"]
    assert "1" in m["loss_at"] and str(m["steps"]) in m["loss_at"]
    feats = r["env"]["cpu_features"]
    assert feats["flags_read"] and "avx2" in feats["flags"] and feats["cpus_granted"] >= 1
    assert r["precision"]["cpu_math"]["native"] is True and r["precision"]["cpu_math"]["unit"].startswith("fp32")


# A program's losses, as each parser reads them in this era (json.dumps writes NaN and -Infinity): the braces doubled,
# as argv's placeholders want.
LOSS_PROGRAMS = {
    "pattern": ("print('step 0: loss 2.3, 500 samples/s'); print('step 1: loss nan, 500 samples/s'); "
                "print('step 2: loss 1.9, 500 samples/s')",
                {"kind": "pattern", "figures": {"loss": {"regex": r"loss (\S+),"},
                                                "throughput": {"regex": r"(\S+) samples/s", "unit": "samples/s"}}},
                "pattern parser: loss became nan at the 2nd of the 3 losses read (pattern: figure loss)"),
    "mllog": ("import json\nfor i, l in enumerate([2.3, float('-inf'), 1.9]): print(':::MLLOG ' + json.dumps("
              "{{'key': 'tracked_stats', 'time_ms': i, 'value': {{'throughput': 500.0, 'loss': l}}}}))",
              {"kind": "mllog", "skip": 0}, "mllog parser: loss became -inf at the 2nd of the 3 losses read"),
    "measure": ("import time\nfrom matrix_bench import measure\nw = measure.start('cpu')\ntime.sleep(0.05)\n"
                "measure.report(w, items=64, loss=1.9, losses=[2.3, float('inf'), 1.9])",
                {"kind": "matrix"}, "loss became inf at the 2nd of the 3 losses read (measure: the losses the script"),
}


@pytest.mark.parametrize("kind", list(LOSS_PROGRAMS))
def test_2018_a_programs_non_finite_loss_makes_the_launcher_say_diverged(box_2018: EraBox, kind: str) -> None:
    """Python 3.6 and PyTorch 1.0: every parser keeps every loss it reads (LossSeen), the launcher and
    matrix_bench.measure say diverged (exit 5) for a NaN or an infinity at step 2 of 3, finite after it."""
    from tests.backends.workloads.test_repeat_output import config

    program, parser, words = LOSS_PROGRAMS[kind]
    run = box_2018.workload([box_2018.recipe.interpreter, "-c", program], config(parser))
    assert run.code == 5 and run.result["status"] == "diverged", run.output
    assert run.result["reason"].startswith(words), run.result["reason"]
    assert run.result["metrics"]["loss_seen"]["nonfinite"] == 1 and "Traceback" not in run.output
