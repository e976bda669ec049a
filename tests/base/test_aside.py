"""Texts made in a forked child (runner/base/aside.py): the child's text is the text `make()` makes, character for
character; whenever no child was forked, or the child did not bring the whole text back, the text is made in the
process, as `make()` makes it there; every child is stopped and reaped when the Aside closes.

A pytest-xdist worker runs threads of its own, so `can_fork()` is False in the test process: the tests of the fork
path run a small program in a fresh interpreter, which asserts and prints, and the test reads its exit status and its
output. The tests of the paths that never fork run here, with os.fork replaced so that a fork would fail them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from runner.base import aside
from runner.base.aside import Aside, can_fork

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this system")

PRELUDE = '''
import atexit, os, signal, sys, threading, time
from runner.base.aside import Aside, can_fork

if (os.cpu_count() or 1) < 2:  # a one-CPU machine: these programs test the fork path, so the second CPU is assumed
    os.cpu_count = lambda: 2
assert can_fork(), "a fresh interpreter with no other thread can fork"
PARENT = os.getpid()
REAL_WRITE = os.write


def reaped(pid):
    """Whether `pid`, a child of this process, is reaped: no child of ours to wait for, and no zombie left."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not os.path.exists(f"/proc/{pid}") if os.path.isdir("/proc/self") else True
    return False


class Report:
    """A pipe a child tells its pid through, before its make does anything else."""

    def __init__(self):
        self.r, self.w = os.pipe()

    def tell(self):
        REAL_WRITE(self.w, b"%d\\n" % os.getpid())

    def pid(self):
        return int(os.read(self.r, 32).split()[0])


def in_child():
    return os.getpid() != PARENT
'''


def run_program(body: str, timeout: float = 20) -> str:
    """Run `body` after PRELUDE in a fresh interpreter; it must end well, print nothing on stderr, and `done` ends it.
    Returns what it printed. The program runs in a session of its own: where it runs past `timeout`, it and every
    child it forked are killed, none left behind."""
    code = PRELUDE + textwrap.dedent(body) + '\nprint("done")\n'
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"ran past {timeout} s\n--- stdout\n{out}\n--- stderr\n{err}") from None
        finally:
            with contextlib.suppress(ProcessLookupError):  # a child the program left running ends with it
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert err == "", err  # the child writes nothing but its pipe, even when it fails
    assert "done" in out.splitlines(), out
    return out


def test_the_program_harness_fails_where_the_program_does() -> None:
    """The fork tests pass only on a program that asserts and ends well."""
    with pytest.raises(AssertionError, match="exit 1"):
        run_program("assert False, 'told'")
    with pytest.raises(AssertionError):
        run_program("sys.stderr.write('noise')")


# ---- the child's text is make()'s text, exactly


def test_the_childs_text_is_the_text_made_character_for_character() -> None:
    out = run_program('''
        big = "0123456789,é✓🎉\\ud800\\udfff\\n" * 400_000  # about 11 MB as UTF-8, many times a pipe's buffer
        texts = {"empty": "", "ascii": "a,b\\n1,2\\n", "unicode": "héllo wörld ✓ 🎉 \\u2028 \\x00 \\ufeff \\U0010ffff",
                 "lone": "\\ud800", "low": "\\udfff", "lones": "a\\udfffb\\ud800\\udc00c", "big": big}
        made_here = []

        def maker(name):
            def make():
                if not in_child():
                    made_here.append(name)
                return texts[name]
            return make

        with Aside() as a:
            for name in texts:  # all at once: children side by side, each on its own pipe
                assert a.start(name, maker(name)), name
            assert a.started == list(texts)
            for name in reversed(list(texts)):  # taken in another order than started
                got = a.text(name, lambda: "FALLBACK")
                assert type(got) is str
                assert got == texts[name], (name, len(got), len(texts[name]), got[:50])
                print(name, len(got))
            assert a.started == []
        assert made_here == [], made_here  # every text came from a child
        assert len(big.encode("utf-8", "surrogatepass")) > 10 * 2 ** 20
    ''')
    assert f"big {17 * 400_000}\n" in out and "lone 1\n" in out and "empty 0\n" in out


def test_the_text_is_made_in_another_process_which_is_reaped_once_taken() -> None:
    run_program('''
        with Aside() as a:
            assert a.start("pid", lambda: str(os.getpid()))
            assert a.started == ["pid"]
            got = a.text("pid", lambda: "made here")
            assert got != "made here" and got.isdigit(), got
            child = int(got)
            assert child != PARENT
            assert reaped(child)  # taken: the child is waited for, no zombie
    ''')


def test_the_child_ignores_ctrl_c_and_the_parent_keeps_its_handler() -> None:
    run_program('''
        before = signal.getsignal(signal.SIGINT)
        with Aside() as a:
            assert a.start("sigint", lambda: repr(signal.getsignal(signal.SIGINT)))
            assert a.text("sigint", lambda: "made here") == repr(signal.SIG_IGN)
        assert signal.getsignal(signal.SIGINT) is before
    ''')


def test_signals_are_held_only_across_the_fork_and_a_held_ctrl_c_reaches_the_parent_with_the_child_known() -> None:
    run_program('''
        before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        with Aside() as a:
            assert a.start("mask", lambda: repr(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
                                              + [int(signal.getsignal(signal.SIGTERM))]))
            assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before  # the parent's mask is back
            assert a.text("mask", lambda: "made here") == repr(sorted(int(s) for s in before) + [int(signal.SIG_DFL)])
        # A Ctrl-C that arrives while the fork is under way is let through once the child is known: close() ends it.
        real_fork = os.fork
        def fork_then_ctrl_c():
            pid = real_fork()
            if pid:
                os.kill(os.getpid(), signal.SIGINT)  # held: delivered when start() lets it through
            return pid
        os.fork = fork_then_ctrl_c
        a = Aside()
        try:
            a.start("late", lambda: time.sleep(60) or "never")
            raise AssertionError("the held Ctrl-C was not delivered")
        except KeyboardInterrupt:
            pass
        finally:
            os.fork = real_fork
        assert a.started == ["late"]
        pid = a._children["late"].pid
        a.close()
        assert reaped(pid)
    ''')


def test_the_child_flushes_no_inherited_buffer_and_runs_no_exit_handler() -> None:
    out = run_program('''
        atexit.register(lambda: print("at exit"))
        sys.stdout.write("written before the fork\\n")  # buffered (stdout is a pipe): the child has a copy of it
        with Aside() as a:
            assert a.start("x", lambda: "child")
            assert a.text("x", lambda: "made here") == "child"
            assert a.start("fails", lambda: 1 / 0)
            assert a.text("fails", lambda: "made here") == "made here"
    ''')
    assert out.count("written before the fork") == 1, out
    assert out.count("at exit") == 1, out


# ---- a child that does not bring the whole text back: the text is made here, as make() makes it here


def test_a_make_that_fails_in_the_child_is_made_here() -> None:
    run_program('''
        def only_here():
            if in_child():
                raise RuntimeError("fails in the child")
            return "made here"

        def always():
            raise ValueError("boom")

        def exits():
            if in_child():
                sys.exit(0)  # SystemExit too: the child ends, the text is made here
            return "made here after exit"

        def not_text():
            return b"bytes" if in_child() else "text made here"

        with Aside() as a:
            for name, make in [("only_here", only_here), ("always", always), ("exits", exits), ("bytes", not_text)]:
                assert a.start(name, make), name
            assert a.text("only_here", only_here) == "made here"
            try:
                a.text("always", always)
            except ValueError as e:  # the error make() raises here, as it always read
                assert str(e) == "boom"
            else:
                raise AssertionError("the error was swallowed")
            assert a.text("exits", exits) == "made here after exit"
            assert a.text("bytes", not_text) == "text made here"
    ''')


def test_a_child_killed_before_it_writes_leaves_the_text_to_the_process() -> None:
    run_program('''
        report = Report()

        def hangs():
            if in_child():
                report.tell()
                time.sleep(60)
            return "made here"

        def kills_itself():
            if in_child():
                os.kill(os.getpid(), signal.SIGKILL)
            return "made here too"

        with Aside() as a:
            assert a.start("killed", hangs)
            assert a.start("suicide", kills_itself)
            child = report.pid()
            os.kill(child, signal.SIGKILL)
            t0 = time.monotonic()
            assert a.text("killed", hangs) == "made here"
            assert a.text("suicide", kills_itself) == "made here too"
            assert time.monotonic() - t0 < 5
            assert reaped(child)
    ''')


def test_a_text_cut_short_is_made_here() -> None:
    """The child ends part way through its write (out of memory, killed): a text short of its length, or a length
    short of its 8 bytes, is not taken; the whole one is."""
    run_program('''
        text = "é" * 1000  # 2,000 bytes, after the 8 of its length

        def cut(keep):
            """A make whose child writes only the first `keep` bytes of what it sends, then ends well."""
            def make():
                if not in_child():
                    return "made here"

                def write(fd, data):
                    REAL_WRITE(fd, bytes(data[:keep]))
                    os._exit(0)
                os.write = write
                return text
            return make

        with Aside() as a:
            for keep in (0, 1, 7, 8, 9, 1000, 2007):
                assert a.start(f"cut{keep}", cut(keep))
                assert a.text(f"cut{keep}", cut(keep)) == "made here", keep
            for keep in (2008, 10_000):  # all of it: the child's text
                assert a.start(f"whole{keep}", cut(keep))
                assert a.text(f"whole{keep}", cut(keep)) == text, keep
    ''')


# ---- close: children stopped and reaped


def test_close_kills_and_reaps_a_child_that_hangs() -> None:
    run_program('''
        reports = [Report(), Report()]

        def hang(report):
            def make():
                if in_child():
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # deaf to all but SIGKILL
                    report.tell()
                    while True:
                        time.sleep(60)
                return "made here"
            return make

        a = Aside()
        assert a.start("one", hang(reports[0])) and a.start("two", hang(reports[1]))
        children = [r.pid() for r in reports]  # both are in make() now
        assert not any(reaped(c) for c in children)  # still running
        t0 = time.monotonic()
        a.close()
        assert time.monotonic() - t0 < 5
        assert all(reaped(c) for c in children), children
        assert a.started == []
        assert a.text("one", lambda: "made here") == "made here"  # closed: made here, nothing waited for

        report = Report()
        with Aside() as b:  # the context manager's exit does the same, and on an error too
            assert b.start("three", hang(report))
            child = report.pid()
        assert reaped(child)
        try:
            with Aside() as c:
                assert c.start("four", hang(report))
                child = report.pid()
                raise KeyError("the report failed")
        except KeyError:
            pass
        assert reaped(child)
    ''')


def test_a_child_stopped_or_stuck_holds_the_process_for_wait_then_the_text_is_made_here() -> None:
    run_program('''
        import runner.base.aside as aside_mod
        aside_mod.WAIT = 0.5
        report = Report()

        def make():
            if in_child():
                report.tell()
                os.kill(os.getpid(), signal.SIGSTOP)  # alive, and silent
            return "made here"

        a = Aside()
        assert a.start("t", make)
        child = report.pid()
        t0 = time.monotonic()
        assert a.text("t", make) == "made here"
        assert 0.5 <= time.monotonic() - t0 < 3
        assert reaped(child)
    ''')


def test_no_descriptor_is_left_open() -> None:
    run_program('''
        if os.path.isdir("/proc/self/fd"):
            before = sorted(os.listdir("/proc/self/fd"))
            with Aside() as a:
                for i in range(20):
                    assert a.start(f"t{i}", lambda: "x" * 100_000)
                    if i % 2:
                        assert a.text(f"t{i}", lambda: "") == "x" * 100_000
                assert a.start("fails", lambda: 1 / 0)
                assert a.text("fails", lambda: "here") == "here"
            assert sorted(os.listdir("/proc/self/fd")) == before
    ''')


# ---- names: never started, started twice, taken twice


def test_a_name_is_started_once_until_its_text_is_taken() -> None:
    run_program('''
        second = []
        with Aside() as a:
            assert a.start("n", lambda: "first")
            assert a.start("n", lambda: second.append(1) or "second") is False
            assert a.started == ["n"]
            assert a.text("n", lambda: "made here") == "first"
            assert a.text("n", lambda: "made here") == "made here"  # taken: the second time it is made here
            assert a.text("never", lambda: "never started") == "never started"
            assert a.start("n", lambda: "again")  # taken, the name can start again
            assert a.text("n", lambda: "made here") == "again"
        assert second == []
    ''')


def test_no_fork_while_another_thread_runs() -> None:
    run_program('''
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        made = []

        def make():
            made.append(os.getpid())
            return str(os.getpid())

        with Aside() as a:
            assert not can_fork()
            assert a.start("t", make) is False
            assert made == [] and a.started == []  # nothing made until asked
            assert a.text("t", make) == str(PARENT)
            assert made == [PARENT]
            stop.set()
            thread.join()
            assert can_fork() and a.start("t", make)  # the thread gone, the child is forked
            assert a.text("t", make) != str(PARENT)
    ''')


# ---- in the test process: the paths that never fork


@pytest.fixture
def no_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    def fork() -> int:
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", fork)


def test_a_name_never_started_is_made_in_process() -> None:
    calls: list[int] = []

    def make() -> str:
        calls.append(os.getpid())
        return "made \ud800 here"

    assert Aside().text("never", make) == "made \ud800 here"
    assert calls == [os.getpid()]
    with pytest.raises(ZeroDivisionError):
        Aside().text("never", lambda: str(1 / 0))


@pytest.mark.usefixtures("no_fork")
def test_no_fork_in_a_process_with_another_thread() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not can_fork()
        with Aside() as a:
            assert a.start("x", lambda: "child") is False
            assert a.started == []
            assert a.text("x", lambda: "made here") == "made here"
    finally:
        stop.set()
        thread.join()


@pytest.mark.usefixtures("no_fork")
def test_no_fork_with_one_cpu_or_no_fork_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    for cpus in (1, None):
        monkeypatch.setattr(os, "cpu_count", lambda cpus=cpus: cpus)
        assert not can_fork()
        assert Aside().start("x", lambda: "child") is False
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(sys, "platform", "darwin")  # fork is not safe there: the text is made in the process
    assert not can_fork()
    assert Aside().start("x", lambda: "child") is False
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delattr(os, "fork")
    assert not can_fork()
    assert Aside().start("x", lambda: "child") is False


@pytest.mark.parametrize("failing", ["pipe", "fork"])
def test_a_pipe_or_fork_that_fails_starts_nothing_and_leaks_no_descriptor(monkeypatch: pytest.MonkeyPatch,
                                                                           failing: str) -> None:
    opened: list[int] = []
    real_pipe = os.pipe

    def pipe() -> tuple[int, int]:
        if failing == "pipe":
            raise OSError(24, "Too many open files")
        r, w = real_pipe()
        opened.extend((r, w))
        return r, w

    def fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(aside, "can_fork", lambda: True)
    monkeypatch.setattr(os, "pipe", pipe)
    monkeypatch.setattr(os, "fork", fork)
    with Aside() as a:
        assert a.start("x", lambda: "child") is False
        assert a.started == []
        assert a.text("x", lambda: "made here") == "made here"
    assert len(opened) == (2 if failing == "fork" else 0)
    for fd in opened:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed
