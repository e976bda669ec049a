"""Turning a bench process's output into an Outcome."""

from __future__ import annotations

import json

from runner.domain.outcomes import Status, outcome_from_process, tail


def line(**fields: object) -> str:
    return "noise\nMATRIX_RESULT " + json.dumps({"schema": 1, **fields}) + "\n"


def test_result_line_wins() -> None:
    o = outcome_from_process(line(status="ok", metrics={"throughput": 5.0}), "", 0, 1.0, 2.0)
    assert o.status is Status.OK and o.metrics == {"throughput": 5.0} and o.reason == ""


def test_statuses_from_json_and_exit_codes() -> None:
    assert outcome_from_process(line(status="oom", reason="CUDA oom"), "", 3, 0, 1).status is Status.OOM
    assert outcome_from_process(line(status="unsupported", reason="fp16 on cpu"), "", 4, 0, 1).reason == "fp16 on cpu"
    assert outcome_from_process("", "", 3, 0, 1).status is Status.OOM
    crashed = outcome_from_process("", "Traceback...\nRuntimeError: boom\n", 1, 0, 1)
    assert crashed.status is Status.FAILED and crashed.reason == "RuntimeError: boom"
    killed = outcome_from_process("", "", -9, 0, 1)
    assert killed.status is Status.FAILED and killed.reason.startswith("killed by signal 9")
    # An ok line with a failing exit status is not ok.
    assert outcome_from_process(line(status="ok"), "", 1, 0, 1).status is Status.FAILED


def test_unknown_bench_schema_is_a_clear_failure() -> None:
    o = outcome_from_process('MATRIX_RESULT {"schema": 7, "status": "ok"}', "", 0, 0, 1)
    assert o.status is Status.FAILED and "schema 7" in o.reason


def test_tail_keeps_the_end() -> None:
    text = "\n".join(f"line {i}" for i in range(2000))
    t = tail(text, 100)
    assert t.endswith("line 1999") and len(t) <= 100 and t.startswith("line")


def test_rerun_failed_says_what_it_reruns() -> None:
    """The option's help and the run summary print RERUN_FAILED_TEXT: it names every status that
    --rerun-failed adds to what a plain run measures again (cancelled and not_started)."""
    from runner.domain.outcomes import RERUN_FAILED, RERUN_FAILED_TEXT
    words = {"failed": Status.FAILED, "oom": Status.OOM, "diverged": Status.DIVERGED, "refused": Status.REFUSED, "timed-out": Status.TIMEOUT}
    named = {status for word, status in words.items() if word in RERUN_FAILED_TEXT}
    assert named == {s for s in RERUN_FAILED if s.final}
    assert {s for s in RERUN_FAILED if not s.final} <= {Status.CANCELLED, Status.NOT_STARTED}


def test_a_diverged_exit_without_a_line_is_diverged_and_a_line_with_it_is_kept() -> None:
    """bench's exit 5 is a diverged training: with its result line the line's reason is kept, without one the exit
    status says it; neither is read as a crash (exit 1), and an `ok` line with exit 5 is not ok."""
    from runner.domain.bench_contract import EXIT_DIVERGED
    assert outcome_from_process("", "", EXIT_DIVERGED, 0, 1).status is Status.DIVERGED
    o = outcome_from_process(line(status="diverged", reason="loss nan at step 3"), "", EXIT_DIVERGED, 0, 1)
    assert o.status is Status.DIVERGED and o.reason == "loss nan at step 3"
    assert outcome_from_process(line(status="ok"), "", EXIT_DIVERGED, 0, 1).status is Status.DIVERGED
