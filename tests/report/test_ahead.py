"""What a report makes early or beside itself: repeats.csv in a forked child while the views are built
(runner/base/aside.py), the other formats' texts (report.html, summary.csv, report.json) in children while the report
writes report.md, and the answer's chart sent to the PNG helper as soon as the answer exists. None of it changes a
byte of the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.report import painter as painter_mod
from runner.report import render, report_command, views

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter (one thread: a pytest-xdist worker runs others, where the report never forks): the report in
# csv and md, with a record of each child it started and of each text it took from one.
PROGRAM = """
import json, os, sys
from pathlib import Path
from runner.base import aside
from runner.report import report_command
started, taken = [], []
start, text = aside.Aside.start, aside.Aside.text
def spy_start(self, name, make):
    ok = start(self, name, make)
    started.append([name, ok])
    return ok
def spy_text(self, name, make):
    child = self._children.get(name)
    got = text(self, name, make)
    taken.append([name, child is not None])
    return got
aside.Aside.start, aside.Aside.text = spy_start, spy_text
from runner.report import charts
real_bundle = charts.bundle
def spy_bundle():  # which process reads (or makes and caches) the Vega bundle: the report's own, never a child
    with open(sys.argv[4], "a") as log:
        log.write(f"{os.getpid()}\\n")
    return real_bundle()
charts.bundle = spy_bundle
os.cpu_count = lambda: 2  # a one-CPU runner still takes the fork path here
paths = report_command(Path(sys.argv[1]), None, sys.argv[3].split(","), Path(sys.argv[2]))
print(json.dumps({"started": started, "taken": taken, "files": [p.name for p in paths], "pid": os.getpid()}))
"""


def fresh_report(db: Path, out: Path, formats: str = "csv,md") -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    log = out.parent / f"{out.name}.bundle.log"
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(db), str(out), formats, str(log)], capture_output=True,
                          text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    said: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    said["bundle_read_by"] = log.read_text().split() if log.exists() else []
    return said


def test_repeats_csv_comes_from_a_child_and_is_the_one_the_report_makes_in_process(db: Path, tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch
                                                                                     ) -> None:
    said = fresh_report(db, tmp_path / "forked")
    assert said["started"] == [["repeats.csv", True], ["summary.csv", True]], "the fresh report forked a child for " \
        "repeats.csv, then one for summary.csv while it wrote report.md"
    assert sorted(said["taken"]) == [["repeats.csv", True], ["summary.csv", True]], "and took their texts from them"
    monkeypatch.setattr("runner.base.aside.can_fork", lambda: False)
    report_command(db, None, ["csv", "md"], tmp_path / "here")
    for name in ("repeats.csv", "summary.csv", "report.md"):
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name
    assert "repeats.csv" in said["files"] and said["files"][-1] != "repeats.csv"  # in the formats' order


def test_a_child_that_dies_leaves_repeats_csv_to_the_report(db: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.base import aside

    made: list[str] = []
    real = render.start_ahead

    def dying(frame: Any, formats: Any, texts: aside.Aside) -> None:
        real(frame, formats, texts)
        for child in texts._children.values():  # the child is killed before it brings anything back
            os.kill(child.pid, 9)
            made.append("killed")

    monkeypatch.setattr("runner.base.aside.can_fork", lambda: True)
    monkeypatch.setattr(render, "start_ahead", dying)
    report_command(db, None, ["csv"], tmp_path / "killed")
    monkeypatch.setattr("runner.base.aside.can_fork", lambda: False)
    monkeypatch.setattr(render, "start_ahead", real)
    report_command(db, None, ["csv"], tmp_path / "here")
    assert made == ["killed"]
    assert (tmp_path / "killed" / "repeats.csv").read_bytes() == (tmp_path / "here" / "repeats.csv").read_bytes()


def test_every_format_s_text_comes_from_a_child_and_is_the_one_made_in_process(db: Path, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A report in every format: report.html, summary.csv and report.json are made in children while the report writes
    report.md (which waits on the PNG helper), byte for byte the texts made in the process; no child and no helper's
    folder is left."""
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("matrix-charts-*"))
    said = fresh_report(db, tmp_path / "forked", "md,html,csv,json")
    assert said["started"] == [["repeats.csv", True], ["report.html", True], ["summary.csv", True],
                               ["report.json", True]]
    assert sorted(said["taken"]) == sorted(name for name in said["started"])
    assert said["bundle_read_by"] == [str(said["pid"])], "the report's process reads the Vega bundle, never a child"
    files = said["files"]
    assert [f for f in files if f.startswith("report.") or f.endswith(".csv")] == [
        "report.md", "report.html", "summary.csv", "repeats.csv", "report.json"]  # in the formats' order
    monkeypatch.setattr("runner.base.aside.can_fork", lambda: False)
    report_command(db, None, ["md", "html", "csv", "json"], tmp_path / "here")
    for name in ("report.md", "report.html", "summary.csv", "repeats.csv", "report.json"):
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name
    assert set(Path(tempfile.gettempdir()).glob("matrix-charts-*")) <= before


@pytest.mark.parametrize(("formats", "forked"), [(["json"], []), (["md"], []), (["json", "html"], ["report.json"]),
                                                 (["html", "json", "md"], ["report.html", "report.json"])])
def test_the_report_makes_its_last_text_itself(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              formats: list[str], forked: list[str]) -> None:
    """A child is forked for a text only where the report has something else to do meanwhile: the last text is made in
    the process, unless the report then waits on its PNG helper (report.md)."""
    from runner.base import aside

    started: list[str] = []
    monkeypatch.setattr(aside.Aside, "start", lambda self, name, make: started.append(name) or False)
    report_command(db, None, formats, tmp_path / "out")
    assert started == forked


def test_the_answer_is_handed_over_before_the_other_views_and_is_the_model_s(db: Path) -> None:
    from runner import report as rep

    infos, run_ids, rows = rep._read(db, None)
    df, records, name = rep._frame(infos, run_ids, rep.newest(rows), db, rows)
    order: list[str] = []
    handed: list[Any] = []
    real = views.viewset.VIEWS[0].build

    def first_view(ctx: Any) -> Any:
        order.append("views")
        return real(ctx)

    views.viewset.VIEWS[0].build = first_view  # type: ignore[method-assign]
    try:
        model = views.build(df, records, name, history=rep._history(rows), on_summary=lambda s: order.append("summary"),
                            on_answer=lambda a: (order.append("answer"), handed.append(a)))
    finally:
        views.viewset.VIEWS[0].build = real  # type: ignore[method-assign]
    assert order == ["summary", "answer", "views"]
    assert handed == [model.answer] and model.answer is not None


def test_the_answer_chart_is_sent_once_and_the_report_s_pngs_are_unchanged(db: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[int] = []
    real = painter_mod.Painter.submit

    def counting(self: painter_mod.Painter, jobs: Any) -> int:
        sent.append(len(jobs))
        return real(self, jobs)

    monkeypatch.setattr(painter_mod.Painter, "submit", counting)
    aside_pngs = {p.name: p.read_bytes() for p in report_command(db, None, ["md"], tmp_path / "a") if p.suffix == ".png"}
    assert len(sent) == 2 and sent[1] == 1, sent  # the summary's batch, then the answer's: nothing after the views
    monkeypatch.setattr(painter_mod.Painter, "submit", lambda self, jobs: (self.close(), 0)[1])
    here = {p.name: p.read_bytes() for p in report_command(db, None, ["md"], tmp_path / "b") if p.suffix == ".png"}
    assert aside_pngs == here and "answer.png" in here
