"""The commands that read a whole store run with the cyclic collector paused (runner/base/gcpause.py), and leave it as
they found it, however they end."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from runner.base.errors import StoreError
from runner.base.gcpause import batch, collector_paused


def test_paused_inside_and_on_again_after_even_when_the_work_fails() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: still paused, and the outer block turns it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()

    @batch
    def fails() -> None:
        assert not gc.isenabled()
        raise ValueError("no")

    with pytest.raises(ValueError):
        fails()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_report_runs_paused_and_a_failed_one_leaves_the_collector_on(tmp_path: Path) -> None:
    import runner.report as report
    from runner.store import Store

    seen = []
    real = report._read

    def read(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with Store(tmp_path / "empty.db"):
        pass
    with pytest.MonkeyPatch.context() as m:
        m.setattr(report, "_read", read)
        with pytest.raises(StoreError):
            report.report_command(tmp_path / "empty.db", None, ["json"], tmp_path / "out")
    assert seen == [False] and gc.isenabled()
