"""A figure the repeat did not produce, or one outside its metric's domain, is never stored `ok`: a NaN the
program logged is not skipped for an earlier value (a loss makes the repeat diverged, another figure fails it), a rate at or below zero is refused, a DLLogger summary wins
over per-step keys as documented and its time unit is converted, and a log file that is a FIFO, a device or
another user's file is refused without hanging the launcher."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from runner.bench import parsers
from runner.bench import workload as launcher
from runner.bench.workload import judge
from tests.backends.workloads.test_repeat_output import config, repeat


def feed(cfg: dict[str, Any], lines: list[str]) -> dict[str, Any]:
    parser = parsers.make(cfg)
    for line in lines:
        parser.feed(line)
    return parser.outcome()


PATTERN = {"kind": "pattern", "figures": {"loss": {"regex": r"loss (\S+)"},
                                          "throughput": {"regex": r"(\S+) img/s", "unit": "img/s"}}}


@pytest.mark.parametrize("reduce", ["last", "min", "max", "mean"])
def test_a_nan_the_program_printed_last_is_never_skipped_for_an_earlier_value(reduce: str) -> None:
    cfg = config({"kind": "pattern", "figures": {"loss": {"regex": r"loss (\S+)", "reduce": reduce},
                                                 "throughput": {"regex": r"(\S+) img/s", "unit": "img/s"}}})
    parser = parsers.make(cfg)
    for line in ["loss 2.0", "100 img/s", "loss nan"]:
        parser.feed(line)
    found = parser.outcome()
    assert found["losses"]["nonfinite"] == 1, found  # a loss: the training diverged
    assert judge(0, found, [], parser) == ("diverged", "pattern parser: loss became nan at the 2nd of the 2 losses "
                                                       "read (pattern: figure loss); last finite loss 2 before it")
    own = config({"kind": "pattern", "figures": {"ppl": {"regex": r"ppl (\S+)", "reduce": reduce, "better": "lower"},
                                                 "throughput": {"regex": r"(\S+) img/s", "unit": "img/s"}}})
    found = feed(own, ["ppl 2.0", "100 img/s", "ppl nan"])
    assert found["problem"] and "nan" in found["problem"], found  # a figure of the user's own: a broken figure


def mllog(*events: dict[str, Any]) -> list[str]:
    return [":::MLLOG " + json.dumps(e) for e in events]


def test_an_mllog_nan_accuracy_fails_and_a_nan_loss_diverges_rather_than_keeping_the_earlier_one() -> None:
    base = [{"key": "run_start", "time_ms": 0}, {"key": "tracked_stats", "value": {"throughput": 100.0, "loss": 2.0}},
            {"key": "tracked_stats", "value": {"throughput": 110.0, "loss": 1.0}}]
    stop = {"key": "run_stop", "time_ms": 1000, "metadata": {"status": "success"}}
    diverged = feed(config({"kind": "mllog"}), mllog(*base, {"key": "tracked_stats", "value": {"throughput": 120.0,
                                                                                              "loss": float("nan")}}, stop))
    assert diverged["losses"]["nonfinite"] == 1 and diverged["losses"]["first_nonfinite_at"] == 3
    eval_nan = feed(config({"kind": "mllog"}), mllog(*base, {"key": "eval_accuracy", "value": 0.7},
                                                     {"key": "eval_accuracy", "value": float("nan")}, stop))
    assert eval_nan["problem"] and "accuracy" in eval_nan["problem"]
    # a NaN warm-up record still counts as one of the records skipped: the skip is of records, not of numbers
    warm = feed(config({"kind": "mllog"}), mllog({"key": "tracked_stats", "value": {"throughput": float("nan")}},
                                                 {"key": "tracked_stats", "value": {"throughput": 100.0}},
                                                 {"key": "tracked_stats", "value": {"throughput": 200.0}}))
    assert warm["problem"] is None and warm["metrics"]["throughput"] == 150.0


@pytest.mark.parametrize("text", ["-100 img/s", "0 img/s", "0.0 img/s"])
def test_a_throughput_at_or_below_zero_is_refused(text: str) -> None:
    found = feed(config(PATTERN), ["loss 2.0", text])
    assert found["problem"] and "throughput" in found["problem"] and "above zero" in found["problem"]


def test_a_negative_time_per_step_gives_no_negative_throughput() -> None:
    cfg = config({"kind": "pattern", "items_per_step": "32",
                  "figures": {"iter_time": {"regex": r"time (\S+)ms", "unit": "ms"}}})
    found = feed(cfg, ["iter 1: time -5.0ms"])
    assert found["problem"] and "iter_time" in found["problem"]


def dll(*records: dict[str, Any]) -> list[str]:
    return ["DLLL " + json.dumps(r) for r in records]


def test_a_dllogger_summary_wins_over_another_keys_per_step_values() -> None:
    found = feed(config({"kind": "dllogger"}), dll(
        {"type": "LOG", "step": [1], "data": {"throughput_train": 100}},
        {"type": "LOG", "step": [2], "data": {"throughput_train": 100}},
        {"type": "LOG", "step": [], "data": {"train.total_ips": 5000}}))
    assert found["metrics"]["throughput"] == 5000
    assert "summary" in found["definitions"]["throughput"]["how"]


@pytest.mark.parametrize(("unit", "seconds"), [("min", 120.0), ("ms", 0.002), ("s", 2.0), ("", 2.0)])
def test_a_dllogger_total_time_is_converted_from_its_logged_unit(unit: str, seconds: float) -> None:
    found = feed(config({"kind": "dllogger"}), dll(
        {"type": "METADATA", "metric": "total_time", "metadata": {"unit": unit}},
        {"type": "LOG", "step": [], "data": {"total_time": 2, "throughput": 10}}))
    assert found["metrics"]["window_s"] == pytest.approx(seconds)


def test_a_dllogger_total_time_in_an_unknown_unit_is_refused() -> None:
    found = feed(config({"kind": "dllogger"}), dll(
        {"type": "METADATA", "metric": "total_time", "metadata": {"unit": "fortnights"}},
        {"type": "LOG", "step": [], "data": {"total_time": 2, "throughput": 10}}))
    assert found["problem"] and "fortnights" in found["problem"] and "window_s" not in found["metrics"]




def run_bounded(argv: list[str], parser: dict[str, Any]) -> dict[str, Any]:
    """The repeat in a thread: a launcher that hangs fails the test instead of hanging it."""
    out: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: out.update(repeat(argv, parser)), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "the launcher hangs on the log file"
    return out


WRITES_NOTHING = [sys.executable, "-c", "print('done')"]


@pytest.mark.parametrize("make", [os.mkfifo, lambda log: log.symlink_to("/dev/zero")],
                         ids=["a fifo where the log file goes", "a link to a device that never ends"])
def test_a_log_file_that_is_not_a_regular_file_fails_the_repeat_without_hanging(tmp_path: Path, make: Any) -> None:
    log = tmp_path / "log.txt"
    make(log)
    cfg = config({"kind": "pattern", "file": str(log), "figures": PATTERN["figures"]})
    result = run_bounded(WRITES_NOTHING, cfg)
    assert result["status"] == "failed" and "not a regular file" in result["reason"]


def test_a_log_file_rewritten_with_the_same_bytes_during_the_repeat_is_read(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("loss 1.0\n100 img/s\n")
    os.utime(log, (1_000_000_000, 1_000_000_000))  # the earlier repeat's file, written long ago
    rewrite = [sys.executable, "-c", f"open({str(log)!r}, 'w').write('loss 1.0\\n100 img/s\\n')"]
    cfg = config({"kind": "pattern", "file": str(log), "figures": PATTERN["figures"]})
    result = repeat(rewrite, cfg)
    assert result["status"] == "ok", result["reason"]
    assert result["metrics"]["throughput"] == 100.0


def test_a_log_file_kept_growing_after_the_program_ends_is_read_up_to_its_end_then(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    cfg = config({"kind": "pattern", "file": str(log), "figures": PATTERN["figures"]})
    parser = parsers.make(cfg)
    log.write_text("loss 1.0\n100 img/s\n")
    fed: list[str] = []

    class Growing:
        config = parser.config

        def feed(self, line: str) -> None:
            fed.append(line)
            with log.open("a") as f:  # a process left behind keeps appending while the launcher reads
                f.write("999 img/s\n")

    assert launcher.read_file(str(log), Growing(), None) is None
    assert fed == ["loss 1.0", "100 img/s"]


def test_another_users_file_where_the_log_goes_is_not_this_repeats(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if os.getuid() != 0:
        pytest.skip("making a file of another user needs root")
    log = tmp_path / "log.txt"
    log.write_text("")
    os.chown(log, 4242, 4242)  # another local user's file, planted where the program appends its log
    writes = [sys.executable, "-c", f"open({str(log)!r}, 'a').write('loss 1.0\\n100 img/s\\n')"]
    cfg = config({"kind": "pattern", "file": str(log), "figures": PATTERN["figures"]})
    monkeypatch.setattr(launcher.os, "getuid", lambda: 1000)  # the launcher as an unprivileged user
    result = repeat(writes, cfg)
    assert result["status"] == "failed" and "belongs to user id 4242" in result["reason"]


def test_a_progress_line_longer_than_a_read_is_never_cut_inside_an_update(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "MAX_LINE", 50)  # a read of a line without newline (tqdm's \r updates) is cut
    bar = [sys.executable, "-c", "import sys; sys.stdout.write(''.join('\\r%d img/s' % (1000 + i) for i in range(60)))"]
    cfg = config({"kind": "pattern", "figures": {"throughput": {"regex": r"(\d+) img/s", "unit": "img/s",
                                                                "reduce": "min"}}})
    result = repeat(bar, cfg)
    assert result["status"] == "ok", result["reason"]
    assert result["metrics"]["throughput"] == 1000.0
    assert result["workload"]["found"]["matches"]["throughput"] == 60


def test_a_log_files_progress_line_longer_than_a_read_is_never_cut_inside_an_update(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "MAX_LINE", 50)
    log = tmp_path / "log.txt"
    cfg = config({"kind": "pattern", "file": str(log),
                  "figures": {"throughput": {"regex": r"(\d+) img/s", "unit": "img/s", "reduce": "min"}}})
    bar = [sys.executable, "-c", f"open({str(log)!r}, 'w').write(''.join('\\r%d img/s' % (1000 + i) for i in range(60)))"]
    result = repeat(bar, cfg)
    assert result["status"] == "ok", result["reason"]
    assert result["metrics"]["throughput"] == 1000.0
