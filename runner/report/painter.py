"""The report's PNG charts drawn in a second process while the first goes on: vl-convert holds the interpreter lock
while it draws and spends most of a second starting its JavaScript engine, so a report that wants PNGs (Markdown)
starts this helper before it reads the store; the helper starts its engine at once, draws the specs it is sent,
and the report writes its other formats meanwhile. On a machine with one core it costs nothing more than drawing in
the process; where the helper cannot start or fails, every chart it did not draw is drawn in the process, where an
error reads as it always did.

The helper speaks through its pipes: it reads one JSON document, a list of [spec, Vega-Lite version, scale], and
writes for each a byte (1: a PNG follows, 0: it failed) and the PNG's length in 8 bytes, then the PNG. It writes no
file: the report writes every file itself (runner/base/safewrite.py)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any, BinaryIO

HEAD = struct.Struct(">BQ")   # drawn or not, and the PNG's length
WAIT = 300.0                  # seconds the report waits for the helper's charts before it draws the rest itself
LARGEST = 1 << 30             # bytes: a PNG said to be larger is a garbled answer
PNG = b"\x89PNG\r\n\x1a\n"
WARM = {"data": {"values": [{"x": 1}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}}


class Painter:
    """The helper process, started at once; `submit` sends it the charts, `png(i)` waits for the i-th (None where the
    helper did not draw it: the caller draws it then). `close` ends the helper whatever state it is in."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._drawn: list[bytes | None] = []
        self._reader: threading.Thread | None = None
        self._n = 0
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_root(), os.environ.get("PYTHONPATH"))
                                                               if p)}
            self._proc = subprocess.Popen([sys.executable, "-m", "runner.report.painter"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        except OSError:
            self._proc = None

    def submit(self, jobs: Sequence[tuple[dict[str, Any], str, float]]) -> None:
        """Send every chart at once (the helper reads them all before it draws) and read their PNGs, on a thread: the
        report's other formats are written meanwhile, and a helper that stops reading or answering holds no one."""
        self._n = len(jobs)
        self._drawn = [None] * len(jobs)
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            return
        try:
            sent = json.dumps([list(j) for j in jobs], allow_nan=False).encode()
        except (TypeError, ValueError):  # a value JSON cannot carry: the report draws them, and says what is wrong
            self.close()
            return
        self._reader = threading.Thread(target=self._talk, args=(proc.stdin, proc.stdout, sent), daemon=True)
        self._reader.start()

    def _talk(self, into: BinaryIO, out: BinaryIO, sent: bytes) -> None:
        try:
            into.write(sent)
            into.close()
            self._read(out)
        except (OSError, ValueError):  # the helper is gone (or was ended): what it did not draw is drawn here
            return

    def _read(self, out: BinaryIO) -> None:
        for i in range(self._n):
            head = _exactly(out, HEAD.size)
            if head is None:
                return
            ok, size = HEAD.unpack(head)
            if ok not in (0, 1) or size > LARGEST:  # not the helper's answer: nothing more it sends is trusted
                return
            body = _exactly(out, size) if size else b""
            if body is None:
                return
            if ok and body.startswith(PNG):
                self._drawn[i] = body

    def png(self, i: int) -> bytes | None:
        if self._reader is not None:
            self._reader.join(WAIT)
            if self._reader.is_alive():  # a helper stuck: the charts it has not sent are drawn in the report
                self.close()
            self._reader = None
        return self._drawn[i] if i < len(self._drawn) else None

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()  # first: a thread writing to it or reading from it is let go
        proc.wait()
        if self._reader is not None:
            self._reader.join()
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
        # The engine starts, with the newest Vega-Lite (Altair's), while the report reads the store.
        vl_convert.vegalite_to_png(WARM, vl_version=vl_convert.get_vegalite_versions()[-1], scale=1.0)
    except Exception:  # noqa: BLE001  (a failure here is the charts' own, said when they are drawn in the report)
        pass
    jobs = json.loads(sys.stdin.buffer.read() or b"[]")
    for spec, version, scale in jobs:
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
