"""The report's PNG charts drawn in a second process (runner/report/painter.py): the same bytes the report would draw
itself, every chart still drawn when the helper cannot start, dies or stops answering, and no helper left behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runner.report import painter as painter_mod
from runner.report import report_command
from runner.report.charts import SCALE, vl_version

PNG = painter_mod.PNG


def spec(n: int) -> dict[str, object]:
    return {"data": {"values": [{"x": i, "y": (i * 7) % 5} for i in range(n)]}, "mark": "point",
            "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "quantitative"}}}


def helpers() -> list[int]:
    """This process's children that are the painter's helper."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"runner.report.painter" in cmd:
            found.append(int(pid))
    return found


def test_the_helper_draws_what_the_report_would_draw_byte_for_byte() -> None:
    import vl_convert

    jobs = [(spec(3), vl_version(), SCALE), (spec(40), vl_version(), SCALE), (spec(7), vl_version(), SCALE)]
    with painter_mod.Painter() as p:
        firsts = [p.submit(jobs[:2]), p.submit(jobs[2:])]  # sent in two batches, numbered on
        drawn = [p.png(2), p.png(0), p.png(1)]
        assert p.png(3) is None  # never sent: the caller draws it
    assert firsts == [0, 2]
    here = [bytes(vl_convert.vegalite_to_png(s, vl_version=v, scale=sc)) for s, v, sc in (jobs[2], *jobs[:2])]
    assert drawn == here
    assert all(d is not None and d.startswith(PNG) for d in drawn)
    assert not helpers()


def test_a_chart_the_helper_cannot_draw_is_none_and_the_others_come_back() -> None:
    bad = {"mark": "no-such-mark", "data": {"values": [{"x": 1}]}}
    with painter_mod.Painter() as p:
        p.submit([(spec(3), vl_version(), SCALE), (bad, vl_version(), SCALE), (spec(4), vl_version(), SCALE)])
        got = [p.png(i) for i in range(3)]
    assert got[1] is None
    assert got[0] is not None and got[0].startswith(PNG) and got[2] is not None and got[2].startswith(PNG)


def report_pngs(db: Path, out: Path) -> dict[str, bytes]:
    paths = report_command(db, None, ["md", "json"], out)
    assert [p.name for p in paths][-1] == "report.json", "the files come back in the formats' order"
    return {p.name: p.read_bytes() for p in paths if p.suffix == ".png"}


@pytest.fixture
def drawn_here(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The report's PNGs drawn in the report's own process (a helper that answers nothing)."""
    with monkeypatch.context() as m:
        m.setattr(painter_mod.Painter, "submit", lambda self, jobs: (self.close(), 0)[1])
        got = report_pngs(db, tmp_path / "here")
    assert got and all(b.startswith(PNG) for b in got.values())
    return got


def test_a_report_draws_its_charts_aside_and_they_are_the_same(db: Path, tmp_path: Path,
                                                              drawn_here: dict[str, bytes]) -> None:
    assert report_pngs(db, tmp_path / "aside") == drawn_here
    assert not helpers()


def test_a_helper_that_cannot_start_leaves_the_charts_to_the_report(db: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    drawn_here: dict[str, bytes]) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    assert report_pngs(db, tmp_path / "nostart") == drawn_here


def test_a_helper_killed_midway_leaves_the_rest_to_the_report(db: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              drawn_here: dict[str, bytes]) -> None:
    submit = painter_mod.Painter.submit

    def killed(self: painter_mod.Painter, jobs: list[tuple[dict[str, object], str, float]]) -> int:
        first = submit(self, jobs)
        if self._proc is not None:  # the first batch kills it; a later one finds it ended
            self._proc.kill()
        return first

    monkeypatch.setattr(painter_mod.Painter, "submit", killed)
    assert report_pngs(db, tmp_path / "killed") == drawn_here
    assert not helpers()


def test_a_helper_that_stops_answering_is_ended_and_the_report_draws_the_rest(
        db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drawn_here: dict[str, bytes]) -> None:
    submit = painter_mod.Painter.submit

    def stuck(self: painter_mod.Painter, jobs: list[tuple[dict[str, object], str, float]]) -> int:
        if self._proc is not None:  # the first batch stops it; a later one finds it ended
            os.kill(self._proc.pid, 19)  # SIGSTOP: alive, and silent
        return submit(self, jobs)

    monkeypatch.setattr(painter_mod, "WAIT", 1.0)
    monkeypatch.setattr(painter_mod.Painter, "submit", stuck)
    assert report_pngs(db, tmp_path / "stuck") == drawn_here
    assert not helpers()


def test_a_report_that_fails_before_its_charts_leaves_no_helper(tmp_path: Path) -> None:
    from runner.base.errors import StoreError
    from runner.store import Store

    with Store(tmp_path / "empty.db"):
        pass
    with pytest.raises(StoreError):
        report_command(tmp_path / "empty.db", None, ["md"], tmp_path / "out")
    assert not helpers()


def test_what_the_engine_prints_never_reaches_the_answers(tmp_path: Path) -> None:
    """Anything written to stdout inside the helper (an engine's console) goes to stderr; the answers stay whole."""
    import json
    import subprocess

    noisy = ("import os, sys\nfrom runner.report import painter\nloads = painter.json.loads\n"
             "painter.json.loads = lambda b: (os.write(1, b'WARN noise\\n'), print('more noise', flush=True), "
             "loads(b))[2]\nsys.exit(painter.main(sys.argv[1]))\n")
    folder = tmp_path / "charts"
    folder.mkdir()
    (folder / "0.json").write_text(json.dumps([[spec(3), vl_version(), SCALE]]))
    helper = subprocess.Popen([sys.executable, "-c", noisy, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2])
    assert helper.stdin is not None and helper.stdout is not None and helper.stderr is not None
    helper.stdin.write(b"0 1\n")
    helper.stdin.flush()
    head = helper.stdout.read(painter_mod.HEAD.size)
    p = painter_mod.Painter(start=False)
    p._sent, p._over, p._dir = 1, False, folder
    p._take(head)
    assert p._heads == [(1, (folder / "0.png").stat().st_size)]
    drawn = p.png(0)
    assert drawn is not None and drawn.startswith(PNG) and not (folder / "0.png").exists()
    helper.stdin.close()  # the report's end: the helper ends, its folder with it
    assert helper.wait(timeout=60) == 0 and helper.stdout.read() == b""
    assert b"noise" in helper.stderr.read() and not folder.exists()


def test_a_report_killed_outright_leaves_no_helper_and_no_folder(tmp_path: Path) -> None:
    """SIGKILL gives the report no chance to clean up: its helper sees the pipe close, ends, and removes the folder."""
    import subprocess
    import time

    program = ("import os, sys\nfrom runner.report import painter\np = painter.Painter()\n"
               "p.submit([(dict(" + repr(spec(30)) + "), " + repr(vl_version()) + ", 1.0)])\n"
               "print(p._dir, p._proc.pid, flush=True)\nos.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == -9
    folder, pid = done.stdout.split()
    deadline = time.monotonic() + 60
    while (Path(folder).exists() or Path(f"/proc/{pid}").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(folder).exists()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


@pytest.mark.parametrize(("answer", "file"), [
    (b"WARN something\n" + b"\x00" * 64, PNG),                                 # text where a head should be
    (painter_mod.HEAD.pack(1, 5), b"hello"),                                    # a file that is no PNG
    (painter_mod.HEAD.pack(7, 8), PNG),                                         # a flag that is neither 0 nor 1
    (painter_mod.HEAD.pack(1, 1 << 40), PNG),                                   # a size no PNG has
    (painter_mod.HEAD.pack(1, 100), PNG),                                       # a file cut short
    (painter_mod.HEAD.pack(0, 8), PNG),                                         # said not drawn
    (painter_mod.HEAD.pack(1, 8) * 3, PNG),                                     # more answers than charts sent
    (b"", None),                                                                # drawn, said, but no file
])
def test_a_garbled_answer_is_not_taken_for_a_chart(tmp_path: Path, answer: bytes, file: bytes | None) -> None:
    if file is not None:
        (tmp_path / "0.png").write_bytes(file)
    p = painter_mod.Painter(start=False)
    p._sent, p._over, p._dir = 2, False, tmp_path
    p._take(answer or painter_mod.HEAD.pack(1, 8))
    assert p.png(0) is None


def test_a_slow_helper_holds_the_report_for_wait_in_all_not_per_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper alive but answering nothing: the report waits WAIT once, then draws every chart itself, and the
    helper is ended."""
    import subprocess
    import time

    monkeypatch.setattr(painter_mod, "WAIT", 0.4)
    p = painter_mod.Painter(start=False)
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    p._proc, p._sent, p._over = silent, 4, False  # four charts sent, no answer, and none said to be the last
    t = time.monotonic()
    assert [p.png(i) for i in range(4)] == [None] * 4
    assert 0.4 <= time.monotonic() - t < 0.8
    assert silent.poll() is not None  # ended, not left behind


def test_the_report_never_waits_on_a_busy_helper_and_the_folder_goes_with_it() -> None:
    """A batch far larger than a pipe holds goes through the folder: `submit` returns at once even while the helper
    is stopped; the folder is private and is removed with the helper."""
    import stat
    import time

    big = [(spec(4000), vl_version(), SCALE) for _ in range(3)]
    with painter_mod.Painter() as p:
        assert p._proc is not None and p._dir is not None
        folder = p._dir
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        os.kill(p._proc.pid, 19)  # SIGSTOP: it reads nothing
        t = time.monotonic()
        for _ in range(4):
            p.submit(big)
        assert time.monotonic() - t < 2.0
        os.kill(p._proc.pid, 18)  # SIGCONT
        assert p.png(0) is not None
    assert not folder.exists() and not helpers()
