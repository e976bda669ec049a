"""A transformer's throughput is tok/s in every table of a report, its repeats that measured nothing included.

Seen before the fix (reports/transformer-cpu, re-rendered): an `unsupported` fp8 repeat carries no
metrics.definitions, so it took the benchmark's image default and the grid's heading read
"throughput (tok/s | img/s)"; the precision summary's heading was always "throughput (img/s)".
"""

from __future__ import annotations

import json
from pathlib import Path

from runner import analysis as an
from runner.report import report_command
from runner.store import SCHEMA, Store

PARAMS = {"model": "gpt_tiny", "batch_size": 8, "dataset": "synthetic", "gpus": 1, "nodes": 1, "device": "cpu",
          "seq_len": 128}
TOK = {"throughput": {"how": "bench: tokens (sequences x seq_len) over the synchronised measured window",
                      "unit": "tok/s"}}


def fill(db: Path) -> Path:
    with Store(db) as store, store.db:
        t = 1_700_000_000.0
        store.db.execute("INSERT INTO runs (run_id, schema, started_at, finished_at, matrix_name, argv, host, status) "
                         "VALUES ('r1', ?, ?, ?, 'tr', '[]', 'h', 'complete')", (SCHEMA, t, t + 60))
        for key, precision, status, values in (("k32", "fp32", "ok", [1000.0, 1010.0]),
                                               ("kbf", "bf16", "ok", [1300.0, 1290.0]),
                                               ("kf8", "fp8", "unsupported", [0.0, 0.0])):
            params = {**PARAMS, "precision": precision}
            for repeat, v in enumerate(values):
                t += 10
                metrics = {"throughput": v, "window_s": 1.0, "definitions": TOK} if status == "ok" else {}
                store.db.execute(
                    "INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params,"
                    " status, reason, metrics, env, raw, log_tail, started_at, finished_at)"
                    " VALUES (?, 'r1', ?, ?, 'cpu', 'local', '[]', ?, ?, ?, ?, ?, ?, '', ?, ?)",
                    (SCHEMA, key, repeat, json.dumps(params), status,
                     "fp8 needs a GPU" if status != "ok" else None, json.dumps(metrics),
                     json.dumps({"torch": "2.13.0", "device": "cpu"}), json.dumps({"params": params}), t, t + 5))
    return db


def test_a_repeat_that_measured_nothing_takes_its_models_unit() -> None:
    df = an.frame(an.StoredRepeat.many([{"params": {**PARAMS, "precision": "fp8"}, "status": "unsupported", "metrics": {}},
                   {"params": {"model": "mlp"}, "status": "unsupported", "metrics": {}}]))
    assert list(df["unit_throughput"]) == ["tok/s", "img/s"]
    assert list(df["unit_images_per_joule"]) == ["tok/J", "img/J"]


def test_every_table_of_a_transformer_report_says_tok_s(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    report_command(fill(tmp_path / "t.db"), None, ["md"], out)
    text = (out / "report.md").read_text()
    assert "throughput (tok/s)" in text and "img/s" not in text
