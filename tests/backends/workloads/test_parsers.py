"""The parsers of runner/bench/parsers.py, fed what real programs print: mlperf-logging's own MLLogger,
DLLogger's JSON stream format, plain lines; and the launcher's verdict on a program's ending."""

from __future__ import annotations

import io
import json
import logging
import math
from typing import Any

import pytest

from runner.backends.workloads.config import ParserSpec, parser_config
from runner.bench import parsers
from runner.bench.workload import judge, oom_reason


def config(raw: Any) -> dict[str, Any]:
    return parser_config(ParserSpec.model_validate(raw))


def feed(cfg: dict[str, Any], text: str) -> dict[str, Any]:
    parser = parsers.make(cfg)
    for line in text.splitlines():
        parser.feed(line)
    return parser.outcome()


def mllog_lines(events: list[tuple[str, str, Any, dict[str, Any] | None]]) -> str:
    """What mlperf-logging's MLLogger prints for these (kind, key, value, metadata) events."""
    mllog = pytest.importorskip("mlperf_logging.mllog.mllog")
    out = io.StringIO()
    logger = logging.getLogger(f"matrix-test-{id(out)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(logging.StreamHandler(out))
    ml = mllog.MLLogger(logger=logger)
    for kind, key, value, metadata in events:
        getattr(ml, kind)(key=key, value=value, metadata=metadata)
    return "some other output\n" + out.getvalue()


def test_mllog_reads_what_mlperf_logging_writes() -> None:
    text = mllog_lines([
        ("event", "global_batch_size", 64, None), ("start", "run_start", None, None),
        ("event", "tracked_stats", {"throughput": 100.0, "loss": 2.0}, {"step": 0}),
        ("event", "tracked_stats", {"throughput": 300.0, "loss": 1.0}, {"step": 1}),
        ("event", "tracked_stats", {"throughput": 500.0, "loss": 0.5}, {"step": 2}),
        ("event", "eval_accuracy", 0.75, {"epoch_num": 3}), ("event", "train_samples", 1920, None),
        ("end", "run_stop", None, {"status": "success"}),
    ])
    found = feed(config("mllog"), text)
    assert found["problem"] is None
    m = found["metrics"]
    assert m["throughput"] == pytest.approx(400.0)  # the first record is warm-up (skip: 1)
    assert m["accuracy"] == 0.75 and m["loss_end"] == 0.5 and m["images"] == 1920
    assert m["window_s"] is not None and m["window_s"] >= 0
    assert found["notes"]["logged"]["global_batch_size"] == 64
    assert feed(config({"kind": "mllog", "skip": 0}), text)["metrics"]["throughput"] == pytest.approx(300.0)


def test_mllog_without_tracked_stats_takes_samples_over_the_run() -> None:
    lines = [':::MLLOG {"key": "run_start", "time_ms": 1000, "value": null, "metadata": {}}',
             '[1,0]<stdout>::::MLLOG {"key": "train_samples", "time_ms": 1500, "value": 600, "metadata": {}}',
             'INFO:mllog::::MLLOG {"key": "run_stop", "time_ms": 4000, "value": null, "metadata": {"status": "success"}}']
    found = feed(config("mllog"), "\n".join(lines))
    assert found["metrics"]["window_s"] == 3.0
    assert found["metrics"]["throughput"] == 200.0  # a launcher's or logging prefix before the mark is fine
    assert "train_samples" in found["notes"]["throughput_from"]


@pytest.mark.parametrize("lines, words", [
    (["no mllog here", "loss 0.1"], "found no throughput"),
    ([':::MLLOG {"key": "tracked_stats", "time_ms": 1, "value": {"throughput": 5}}'], "all discarded as warm-up"),
    ([':::MLLOG {"key": "run_start", "time_ms": 1}', ':::MLLOG {"key": "tracked_stats", "time_ms": 2, '
      '"value": {"throughput": 5}}', ':::MLLOG {"key": "tracked_stats", "time_ms": 3, "value": {"throughput": 6}}',
      ':::MLLOG {"key": "run_stop", "time_ms": 4, "metadata": {"status": "aborted"}}'], "status 'aborted'"),
    ([':::MLLOG {not json', ':::MLLOG ["a list"]'], "found no throughput"),
])
def test_mllog_says_what_it_did_not_find(lines: list[str], words: str) -> None:
    found = feed(config("mllog"), "\n".join(lines))
    assert found["problem"] and words in found["problem"]


def dlll(record: dict[str, Any]) -> str:
    """A line as dllogger's JSONStreamBackend writes it."""
    base = {"timestamp": "1700000000.0", "datetime": "2023-11-14 22:13:20", "elapsedtime": "1.0"}
    return "DLLL " + json.dumps({**base, **record})


def test_dllogger_prefers_the_summary_and_reads_units() -> None:
    text = "\n".join([
        dlll({"type": "METADATA", "metric": "val.top1", "metadata": {"unit": "%"}}),
        dlll({"type": "LOG", "step": "PARAMETER", "data": {"batch_size": 64}}),
        dlll({"type": "LOG", "step": [0, 1], "data": {"train.total_ips": 10.0, "train.loss": 3.0}}),
        dlll({"type": "LOG", "step": [0, 2], "data": {"train.total_ips": 20.0, "train.loss": 2.0}}),
        dlll({"type": "LOG", "step": [], "data": {"train.total_ips": 555.5, "val.top1": 76.5}}),
    ])
    found = feed(config("dllogger"), text)
    assert found["problem"] is None
    assert found["metrics"] == {"throughput": 555.5, "accuracy": pytest.approx(0.765), "loss_end": 2.0}
    assert found["notes"]["parameters"] == {"batch_size": 64}


def test_dllogger_without_a_summary_averages_steps_after_warm_up() -> None:
    text = "\n".join(dlll({"type": "LOG", "step": [0, i], "data": {"throughput_train": v}})
                     for i, v in enumerate([1.0, 30.0, 50.0]))
    assert feed(config("dllogger"), text)["metrics"]["throughput"] == 40.0
    named = config({"kind": "dllogger", "keys": {"throughput": "my.ips"}})
    assert "found no throughput" in feed(named, text)["problem"]


def test_pattern_converts_units_to_the_store_and_keeps_own_figures() -> None:
    cfg = config({"kind": "pattern", "figures": {
        "throughput": {"regex": r"tput ([0-9.]+) tok/s", "unit": "tok/s", "reduce": "mean", "skip": 1},
        "window_s": {"regex": r"took (?P<value>[\d.]+) ms", "unit": "ms"},
        "peak_mem": {"regex": r"mem ([\d,]+) MiB", "unit": "MiB"},
        "accuracy": {"regex": r"acc ([\d.]+)%", "unit": "%"},
        "perplexity": {"regex": r"ppl ([\d.]+)", "better": "lower", "unit": ""},
    }})
    text = "tput 1 tok/s\ntput 10 tok/s\ntput 20 tok/s\ntook 2500 ms\nmem 1,024 MiB\nacc 50.0%\nppl 12.5\n"
    found = feed(cfg, text)
    assert found["problem"] is None
    assert found["metrics"] == {"throughput": 15.0, "window_s": 2.5, "peak_mem": 2**30, "accuracy": 0.5}
    assert found["figures"] == {"perplexity": {"value": 12.5, "unit": "", "better": "lower"}}


def test_pattern_without_its_figure_is_a_problem_naming_it() -> None:
    cfg = config({"kind": "pattern", "figures": {"throughput": {"regex": r"speed: ([0-9.]+)", "unit": "img/s"},
                                                  "extra": {"regex": "never", "better": "higher",
                                                            "optional": True}}})
    found = feed(cfg, "epoch 1 done\nall done\n")
    assert "figure throughput: no line" in found["problem"] and "speed" in found["problem"]
    loose = config({"kind": "pattern", "figures": {"throughput": {"regex": r"speed: (\S+)", "unit": "img/s"}}})
    assert "'fast', which is not a number" in feed(loose, "speed: fast\n")["problem"]


def test_matrix_parser_takes_the_helpers_line() -> None:
    line = 'MATRIX_RESULT {"schema": 1, "status": "ok", "metrics": {"throughput": 12.5}}'
    found = feed({"kind": "matrix"}, "chatter\n" + line)
    assert found["problem"] is None and found["metrics"]["throughput"] == 12.5
    assert "no MATRIX_RESULT line" in feed({"kind": "matrix"}, "chatter")["problem"]


@pytest.mark.parametrize("raw, words", [
    ({"kind": "pattern", "figures": {"tokens": {"regex": "t (\\d+)"}}}, "say which direction is better"),
    ({"kind": "pattern", "figures": {"throughput": {"regex": "(\\d+)", "unit": "img"}}}, "rate per second"),
    ({"kind": "pattern", "figures": {"throughput": {"regex": "(\\d+)", "unit": "img/s", "better": "lower"}}},
     "better when higher"),
    ({"kind": "pattern", "figures": {"window_s": {"regex": "(\\d+)", "unit": "fortnights"}}}, "allowed: s, sec"),
    ({"kind": "mllog", "figures": {}}, "not a setting of the mllog parser"),
    ({"kind": "pattern"}, "needs figures"),
])
def test_parser_settings_are_checked(raw: Any, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        config(raw)


def test_regex_is_checked_when_read() -> None:
    with pytest.raises(ValueError, match="not a regular expression"):
        ParserSpec.model_validate({"kind": "pattern", "figures": {"throughput": {"regex": "([0-9", "unit": "x/s"}}})


@pytest.mark.parametrize("code, tail, status", [
    (1, ["Traceback", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"], "oom"),
    (1, ["RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate memory"], "oom"),
    (137, ["Killed"], "oom"),
    (-9, [], "oom"),
    (2, ["usage: train.py [-h]", "train.py: error: unrecognized arguments: --x"], "failed"),
    (-11, ["segfault"], "failed"),
])
def test_a_failed_program_is_oom_only_on_its_words_or_sigkill(code: int, tail: list[str], status: str) -> None:
    parser = parsers.make(config("mllog"))
    got, reason = judge(code, parser.outcome(), tail, parser)
    assert got == status, reason
    assert reason


def test_out_of_memory_words_in_a_run_that_succeeded_are_not_oom() -> None:
    parser = parsers.make(config({"kind": "mllog", "skip": 0}))
    parser.feed(':::MLLOG {"key": "tracked_stats", "time_ms": 1, "value": {"throughput": 5}}')
    assert judge(0, parser.outcome(), ["tip: lower the batch size if out of memory"], parser) == ("ok", None)
    assert oom_reason(1, ["nothing to see"]) is None


def test_a_workload_has_no_time_per_iteration_from_bench_settings() -> None:
    """run.iterations is bench's: a program that ran its own steps has no time/iter unless it reported one."""
    from runner.analysis.frame import frame
    from runner.record.stored import StoredRepeat

    params = {"model": "m", "batch_size": 8, "iterations": 50, "warmup": 10, "seed": 0}
    base = {"environment": "e", "status": "ok", "params": params}
    bench = {**base, "metrics": {"throughput": 1.0, "window_s": 5.0}, "raw": {"params": params, "workload": None}}
    program = {**base, "metrics": {"throughput": 1.0, "window_s": 5.0},
               "raw": {"params": params, "workload": {"parser": "mllog"}}}
    measured = {**base, "metrics": {"throughput": 1.0, "window_s": 5.0, "iter_times": [0.25]},
                "raw": {"params": params, "workload": {"parser": "matrix"}}}
    times = list(frame(StoredRepeat.many([bench, program, measured]))["iter_time"])
    assert times[0] == 0.1 and math.isnan(times[1]) and times[2] == 0.25


def test_a_cell_without_a_dataset_has_no_empty_label_segment() -> None:
    from runner.report.labels import cell_label

    row = {"environment": "host", "model": "tiny", "precision": "fp32", "batch_size": 8, "dataset": "",
           "gpus": 1, "nodes": 1, "options": "epochs=4"}
    label = cell_label(row, ["environment", "model", "precision", "batch_size", "dataset", "gpus", "nodes", "options"])
    assert label == "host · tiny · fp32 · batch 8 · epochs=4"
