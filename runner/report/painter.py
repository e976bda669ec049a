"""The report's PNG charts drawn in a second process while the first goes on: vl-convert holds the interpreter lock
while it draws and spends most of a second starting its JavaScript engine, so a report that wants PNGs (Markdown)
starts this helper before it reads the store; the helper starts its engine at once, draws the specs it is sent,
and the report writes its other formats meanwhile. On a machine with one core it costs nothing more than drawing in
the process; where the helper cannot start or fails, every chart it did not draw is drawn in the process, where an
error reads as it always did.

The helper speaks through its pipes: it reads lines, each one JSON list of [spec, Vega-Lite version, scale], and
writes for each chart, in the order sent, a byte (1: a PNG follows, 0: it failed) and the PNG's length in 8 bytes,
then the PNG. It writes no file: the report writes every file itself (runner/base/safewrite.py)."""

from __future__ import annotations

import json
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

HEAD = struct.Struct(">BQ")   # drawn or not, and the PNG's length
WAIT = 300.0                  # seconds the report waits for the helper's charts, in all, before it draws the rest itself
LARGEST = 1 << 30             # bytes: a PNG said to be larger is a garbled answer
PNG = b"\x89PNG\r\n\x1a\n"
WARM = {"data": {"values": [{"x": 1}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}}


class Painter:
    """The helper process, started at once. `submit` sends it charts (more than once: the report sends the charts it
    can make from the summary while it builds the rest) and returns the first one's number; `png(i)` waits for the
    i-th (None where the helper did not draw it: the caller draws it then; all the calls together wait WAIT at
    most); `close` ends the helper whatever state it is in. The helper draws in the order the charts were sent."""

    def __init__(self, start: bool = True) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._sent = 0                                   # charts submitted, numbered in that order
        self._drawn: list[bytes | None] = []             # the answers read so far, in the same order
        self._over = False                               # no more answers will come (the helper ended, or was ended)
        self._cond = threading.Condition()
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._deadline: float | None = None              # when the report stops waiting (WAIT after the first png())
        if not start:
            self._over = True
            return
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_root(), os.environ.get("PYTHONPATH"))
                                                               if p)}
            self._proc = subprocess.Popen([sys.executable, "-m", "runner.report.painter"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        except OSError:
            self._proc = None
            self._over = True

    def submit(self, jobs: Sequence[tuple[dict[str, Any], str, float]]) -> int:
        """Send these charts (one line of JSON) and return the number of the first: the i-th of them is `png(first +
        i)`. Writing and reading happen on threads: the report goes on meanwhile, and a helper that stops reading or
        answering holds no one."""
        first = self._sent
        self._sent += len(jobs)
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            return first
        try:
            line = json.dumps([list(j) for j in jobs], allow_nan=False).encode() + b"\n"
        except (TypeError, ValueError):  # a value JSON cannot carry: the report draws them, and says what is wrong
            self.close()
            return first
        if not self._threads:
            self._threads = [threading.Thread(target=self._write, args=(proc.stdin,), daemon=True),
                             threading.Thread(target=self._listen, args=(proc.stdout,), daemon=True)]
            for t in self._threads:
                t.start()
        self._lines.put(line)
        return first

    def _write(self, into: BinaryIO) -> None:
        try:
            while (line := self._lines.get()) is not None:
                into.write(line)
                into.flush()
            into.close()
        except (OSError, ValueError):  # the helper is gone (or was ended): what it did not draw is drawn here
            return

    def _listen(self, out: BinaryIO) -> None:
        try:
            self._read(out)
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self._over = True
                self._cond.notify_all()

    def _read(self, out: BinaryIO) -> None:
        """Read answers until the helper ends or says something that is not an answer (nothing more it sends is
        trusted then)."""
        while True:
            head = _exactly(out, HEAD.size)
            if head is None:
                return
            ok, size = HEAD.unpack(head)
            if ok not in (0, 1) or size > LARGEST:
                return
            body = _exactly(out, size) if size else b""
            if body is None:
                return
            with self._cond:
                self._drawn.append(body if ok and body.startswith(PNG) else None)
                self._cond.notify_all()

    def png(self, i: int) -> bytes | None:
        if i >= self._sent:
            return None
        if self._deadline is None:
            self._deadline = time.monotonic() + WAIT
        with self._cond:
            answered = self._cond.wait_for(lambda: i < len(self._drawn) or self._over,
                                           max(0.0, self._deadline - time.monotonic()))
            drawn = self._drawn[i] if i < len(self._drawn) else None
        if not answered:  # a helper stuck: the charts it has not sent are drawn in the report
            self.close()
        return drawn

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()  # first: a thread writing to it or reading from it is let go
        proc.wait()
        self._lines.put(None)
        for t in self._threads:
            t.join()
        with self._cond:
            self._over = True
            self._cond.notify_all()
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def __enter__(self) -> Painter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _root() -> str:
    """The folder that holds the `runner` package: the helper imports this module from there, as the report did."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _exactly(stream: BinaryIO, n: int) -> bytes | None:
    parts, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def main() -> int:
    # The answers go out on a copy of stdout; whatever the engine itself prints goes to stderr, never into them.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import vl_convert

    try:
        # The engine starts, with the newest Vega-Lite, while the report reads the store.
        vl_convert.vegalite_to_png(WARM, vl_version=vl_convert.get_vegalite_versions()[-1], scale=1.0)
    except Exception:  # noqa: BLE001  (a failure here is the charts' own, said when they are drawn in the report)
        pass
    for line in sys.stdin.buffer:  # one batch of charts per line, drawn as it comes; the report's end is EOF
        if not line.strip():
            continue
        for spec, version, scale in json.loads(line):
            try:
                png = bytes(vl_convert.vegalite_to_png(spec, vl_version=version, scale=scale))
            except Exception:  # noqa: BLE001  (drawn again in the report, where its error is said)
                out.write(HEAD.pack(0, 0))
            else:
                out.write(HEAD.pack(1, len(png)))
                out.write(png)
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
