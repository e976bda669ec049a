"""What a repeat reports is what that repeat produced: a log file it did not write is never its result,
numbers are read by a stated rule, a unit is part of the figure's definition, and every figure says how
it was obtained (metrics.definitions)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.backends.workloads.config import ParserSpec, parser_config
from runner.bench import parsers
from runner.bench import workload as launcher

APPENDING = """
import sys
from mlperf_logging import mllog
mllog.config(filename=sys.argv[1])  # appends, as mlperf-logging does
log = mllog.get_mllogger()
log.start(key="run_start")
for _ in range(3):
    log.event(key="tracked_stats", value={"throughput": float(sys.argv[2])})
log.event(key="train_samples", value=64)
log.end(key="run_stop", metadata={"status": "success"})
"""


def config(raw: Any) -> dict[str, Any]:
    return parser_config(ParserSpec.model_validate(raw))


def repeat(argv: list[str], parser: dict[str, Any]) -> dict[str, Any]:
    """One repeat through the launcher, as `bench.pyz workload SPEC` runs it in an environment."""
    spec = {"v": launcher.SPEC_VERSION, "name": "t", "argv": argv, "values": {}, "files": None, "params": {},
            "parser": parser}
    real = launcher.capture
    launcher.capture = lambda values: {}  # the environment capture is not what these tests are about
    try:
        code, result = launcher.main([json.dumps(spec)])
    finally:
        launcher.capture = real
    assert result is not None
    return dict(result)


def feed(cfg: dict[str, Any], text: str) -> dict[str, Any]:
    parser = parsers.make(cfg)
    for line in text.split("\n"):
        parser.feed(line)
    return parser.outcome()


def test_an_appended_mllog_file_gives_each_repeat_only_its_own_records(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_logging.mllog")
    script = tmp_path / "train.py"
    script.write_text(APPENDING)
    log = tmp_path / "train_log.json"
    cfg = config({"kind": "mllog", "file": str(log), "skip": 0})
    got = [repeat([sys.executable, str(script), str(log), str(t)], cfg) for t in (100, 200, 300)]
    assert [r["status"] for r in got] == ["ok"] * 3, [r["reason"] for r in got]
    assert [r["metrics"]["throughput"] for r in got] == [100.0, 200.0, 300.0]
    assert all(r["metrics"]["window_s"] < 60 for r in got)
    assert log.read_text().count("run_start") == 3  # the file did hold all three repeats
    assert got[0]["metrics"]["definitions"]["throughput"] == {
        "how": "mllog: mean of tracked_stats throughput after the first 0 records", "unit": "samples/s"}


def test_a_log_file_the_repeat_did_not_write_is_a_failure_not_the_last_result(tmp_path: Path) -> None:
    log = tmp_path / "train_log.json"
    log.write_text(':::MLLOG {"key": "tracked_stats", "time_ms": 1, "value": {"throughput": 1000.0}}\n')
    silent = repeat([sys.executable, "-c", "pass"], config({"kind": "mllog", "file": str(log), "skip": 0}))
    assert silent["status"] == "failed" and silent["metrics"]["throughput"] is None
    assert "wrote nothing to the log file" in silent["reason"] and "{output}" in silent["reason"]
    missing = repeat([sys.executable, "-c", "pass"], config({"kind": "mllog", "file": str(tmp_path / "no.json")}))
    assert missing["status"] == "failed" and "wrote no log file" in missing["reason"]


def test_a_log_file_rewritten_from_the_start_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("speed 5 img/s\n")
    write = f"open({str(log)!r}, 'w').write('speed 7 img/s\\n')"
    got = repeat([sys.executable, "-c", write],
                 config({"kind": "pattern", "file": str(log),
                         "figures": {"throughput": {"regex": r"speed (\S+)", "unit": "img/s"}}}))
    assert got["status"] == "ok" and got["metrics"]["throughput"] == 7.0


def test_the_last_of_the_carriage_return_updates_of_a_progress_line_is_taken() -> None:
    cfg = config({"kind": "pattern", "figures": {"throughput": {"regex": r"([\d.]+) it/s", "unit": "it/s"}}})
    found = feed(cfg, "train: 10.0 it/s\rtrain: 50.0 it/s\rtrain: 100.0 it/s\n")
    assert found["metrics"]["throughput"] == 100.0
    first = config({"kind": "pattern", "figures": {"throughput": {"regex": r"([\d.]+) it/s", "unit": "it/s",
                                                                  "reduce": "first"}}})
    assert feed(first, "a 10.0 it/s\rb 100.0 it/s")["metrics"]["throughput"] == 10.0


@pytest.mark.parametrize("decimal, text, value", [
    (".", "1,234,567.5", 1234567.5), (".", "1234.5", 1234.5), (".", "1,024", 1024.0),
    (",", "1234,5", 1234.5), (",", "1.234.567,5", 1234567.5),
])
def test_numbers_are_read_by_the_stated_decimal_mark(decimal: str, text: str, value: float) -> None:
    cfg = config({"kind": "pattern", "figures": {"throughput": {"regex": r"tput (\S+)", "unit": "img/s",
                                                                "decimal": decimal}}})
    found = feed(cfg, f"tput {text}")
    assert found["problem"] is None and found["metrics"]["throughput"] == value


@pytest.mark.parametrize("decimal, text", [(".", "1234,5"), (".", "12,34"), (",", "1234.5"), (".", "1.234.5")])
def test_an_ambiguous_number_is_refused_not_mangled(decimal: str, text: str) -> None:
    cfg = config({"kind": "pattern", "figures": {"throughput": {"regex": r"tput (\S+)", "unit": "img/s",
                                                                "decimal": decimal}}})
    found = feed(cfg, f"tput 5\ntput {text}\ntput 6")
    assert found["problem"] and text in found["problem"], found
    assert "ambiguous" in found["problem"] or "not a number" in found["problem"]


@pytest.mark.parametrize("unit, scale, shown", [
    ("kimg/s", 1e3, "img/s"), ("Mtok/s", 1e6, "tok/s"), ("samples/s", 1.0, "samples/s"),
    ("img/ms", 1e3, "img/s"), ("tokens/min", 1 / 60, "tokens/s"),
])
def test_a_throughput_unit_with_a_prefix_is_scaled(unit: str, scale: float, shown: str) -> None:
    cfg = config({"kind": "pattern", "figures": {"throughput": {"regex": r"tput (\S+)", "unit": unit}}})
    found = feed(cfg, "tput 2.5")
    assert found["metrics"]["throughput"] == pytest.approx(2.5 * scale)
    assert found["definitions"]["throughput"]["unit"] == shown


@pytest.mark.parametrize("unit, words", [("mimg/s", "m is milli"), ("ms/s", "a time per time"),
                                         ("widgets/s", "not a count"), ("img/fortnight", "rate per second")])
def test_an_ambiguous_or_unknown_throughput_unit_is_refused_with_the_reason(unit: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        config({"kind": "pattern", "figures": {"throughput": {"regex": r"(\S+)", "unit": unit}}})


def test_an_accuracy_above_one_without_a_percent_unit_is_refused() -> None:
    bare = config({"kind": "pattern", "figures": {"accuracy": {"regex": r"acc (\S+)"},
                                                   "throughput": {"regex": r"tput (\S+)", "unit": "img/s"}}})
    found = feed(bare, "tput 5\nacc 76.1")
    assert found["problem"] and "not a fraction" in found["problem"] and "unit: %" in found["problem"]
    percent = config({"kind": "pattern", "figures": {"accuracy": {"regex": r"acc (\S+)", "unit": "%"}}})
    assert feed(percent, "acc 76.1")["metrics"]["accuracy"] == pytest.approx(0.761)
    dll = 'DLLL {"type": "LOG", "step": [], "data": {"train.total_ips": 5.0, "val.top1": 76.1}}'
    assert "accuracy_percent" in (feed(config("dllogger"), dll)["problem"] or "")
    assert feed(config({"kind": "dllogger", "accuracy_percent": True}), dll)["metrics"]["accuracy"] == \
        pytest.approx(0.761)
    ml = ':::MLLOG {"key": "eval_accuracy", "time_ms": 1, "value": 75.9}'
    assert "not a fraction" in (feed(config({"kind": "mllog", "require": []}), ml)["problem"] or "")


def test_an_infinite_figure_is_failed_with_the_reason_never_ok_without_a_value(tmp_path: Path) -> None:
    cfg = config({"kind": "pattern", "figures": {"throughput": {"regex": r"tput (\S+)", "unit": "Gimg/s"}}})
    got = repeat([sys.executable, "-c", "print('tput 1e308')"], cfg)
    assert got["status"] == "failed" and "not a finite number" in got["reason"], got["reason"]
    child = repeat([sys.executable, "-c", "print('MATRIX_RESULT {{\"status\": \"ok\", \"metrics\": "
                                          "{{\"throughput\": Infinity}}}}')"], {"kind": "matrix"})
    assert child["status"] == "failed" and "throughput" in child["reason"]


def test_every_parser_says_how_it_obtained_each_figure_and_its_unit() -> None:
    dll = "\n".join([
        'DLLL {"type": "METADATA", "metric": "train.total_ips", "metadata": {"unit": "images/s"}}',
        'DLLL {"type": "LOG", "step": [], "data": {"train.total_ips": 5.0, "train.compute_ips": 9.0}}'])
    d = feed(config("dllogger"), dll)["definitions"]
    assert d["throughput"] == {"how": "dllogger: train.total_ips (summary record)", "unit": "images/s"}
    own = feed(config({"kind": "dllogger", "keys": {"throughput": "train.compute_ips"}}), dll)["definitions"]
    assert own["throughput"]["how"] == "dllogger: train.compute_ips (summary record)"
    ml = "\n".join([':::MLLOG {"key": "run_start", "time_ms": 0}', ':::MLLOG {"key": "train_samples", "time_ms": 1, '
                    '"value": 100}', ':::MLLOG {"key": "run_stop", "time_ms": 2000, "metadata": {"status": "success"}}'])
    assert feed(config("mllog"), ml)["definitions"]["throughput"] == {
        "how": "mllog: train_samples / (run_stop - run_start)", "unit": "samples/s"}
    pat = config({"kind": "pattern", "figures": {"throughput": {"regex": r"tput (\S+)", "unit": "tok/s"}}})
    assert feed(pat, "tput 3")["definitions"]["throughput"] == {
        "how": r"pattern: figure throughput /tput (\S+)/, last of the matches after 0", "unit": "tok/s"}


def test_a_program_printing_only_its_time_per_step_gets_a_throughput_in_its_own_unit() -> None:
    from runner.backends.workloads.config import arithmetic

    cfg = config({"kind": "pattern", "items_per_step": "{batch_size} * {block_size}", "items": "tokens",
                  "figures": {"iter_time": {"regex": r"time ([\d.]+)ms", "unit": "ms", "reduce": "mean", "skip": 1}}})
    cfg["items_per_step"] = arithmetic(cfg["items_per_step_text"], {"batch_size": "12", "block_size": "64"})
    found = feed(cfg, "iter 0: loss 4.4, time 900.00ms\niter 10: loss 4.37, time 187.00ms, mfu -100.00%\n"
                      "iter 20: loss 4.1, time 213.00ms, mfu 1.2%")
    assert found["problem"] is None
    assert found["metrics"]["throughput"] == pytest.approx(12 * 64 / 0.2)
    assert found["definitions"]["throughput"]["unit"] == "tokens/s"
    assert "{batch_size} * {block_size}" in found["definitions"]["throughput"]["how"]


@pytest.mark.parametrize("expr, words", [
    ("__import__('os').system('x')", "only numbers"), ("{batch_size} ** 99", "only numbers"),
    ("{batch_size} / 0", "division by zero"), ("{batch_size} -", "not arithmetic"),
])
def test_items_per_step_is_arithmetic_of_the_cells_values_only(expr: str, words: str) -> None:
    from runner.backends.workloads.config import arithmetic

    with pytest.raises(ValueError, match=words):
        arithmetic(expr, {"batch_size": "8"})


def test_a_regular_expression_that_never_returns_is_bounded_and_named_as_the_cause() -> None:
    import time

    cfg = config({"kind": "pattern", "figures": {"throughput": {"regex": r"(a+)+$", "unit": "img/s"}}})
    started = time.monotonic()
    got = repeat([sys.executable, "-c", "print('a' * 40 + 'b'); print('speed 5')"], cfg)
    assert time.monotonic() - started < 20
    assert got["status"] == "failed" and got["workload"]["returncode"] == 0
    assert "regular expressions (/(a+)+$/) stopped being matched" in got["reason"]
    assert "took more than 2s" in got["reason"]


def test_a_pattern_configuration_written_before_keeps_its_cell_key() -> None:
    """The new settings (decimal, a prefixed unit's shown unit, items_per_step) enter the parser's configuration,
    and with it the cell key, only when used: an img/s figure measured before is still the same definition."""
    (fig,) = config({"kind": "pattern", "figures": {"throughput": {"regex": r"(\S+)", "unit": "img/s"}}})["figures"]
    assert set(fig) == {"name", "regex", "unit", "reduce", "skip", "optional", "scale", "metric", "better",
                        "stored_unit"}
    (scaled,) = config({"kind": "pattern", "figures": {"throughput": {"regex": r"(\S+)", "unit": "kimg/s",
                                                                      "decimal": ","}}})["figures"]
    assert scaled["shown_unit"] == "img/s" and scaled["decimal"] == "," and scaled["scale"] == 1000.0


def test_a_script_measuring_itself_says_what_it_counted() -> None:
    line = ('MATRIX_RESULT {"status": "ok", "metrics": {"throughput": 12.5, "definitions": {"throughput": '
            '{"how": "measure: items over the script\'s synchronised window", "unit": "tokens/s"}}}}')
    found = feed({"kind": "matrix"}, line)
    assert found["definitions"]["throughput"]["unit"] == "tokens/s"
    plain = feed({"kind": "matrix"}, 'MATRIX_RESULT {"status": "ok", "metrics": {"throughput": 12.5}}')
    assert plain["definitions"]["throughput"]["unit"] == "items/s"
    import inspect

    from runner.bench import measure
    assert inspect.signature(measure.report).parameters["unit"].default == "items"
