"""A stored repeat as a typed record."""

from __future__ import annotations

from runner.record.repeat import Repeat
from runner.record.stored import StoredRepeat


def test_a_repeat_reads_its_row_once_with_its_definitions() -> None:
    row = {"id": 7, "run_id": "r", "cell_key": "k", "repeat": 2, "environment": "e", "status": "ok",
           "metrics": {"throughput": 512.0, "steps": 40, "loss_at": {"20": 1.5, "40": 1.2},
                       "definitions": {"throughput": {"how": "mllog: mean of tracked_stats", "unit": "samples/s"}}}}
    r = Repeat.of(StoredRepeat.of(row))
    assert (r.id, r.number, r.ok, r.final) == (7, 2, True, True)
    assert r.value("throughput") == 512.0 and r.value("peak_mem") is None
    assert r.steps == 40 and r.loss_at == {20: 1.5, 40: 1.2}
    assert r.definition("throughput") == "mllog: mean of tracked_stats [samples/s]"
    assert r.definition("loss_end") == "bench: final loss"
    assert not Repeat.of(StoredRepeat.of({"status": "weird"})).final
