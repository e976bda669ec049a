"""The report's PNG charts drawn in a second process while the first goes on: vl-convert holds the interpreter lock
while it draws and spends most of a second starting its JavaScript engine, so a report that wants PNGs (Markdown)
starts this helper before it reads the store; the helper starts its engine at once, draws the specs it is sent,
and the report writes its other formats meanwhile. On a machine with one core it costs nothing more than drawing in
the process; where the helper cannot start or fails, every chart it did not draw is drawn in the process, where an
error reads as it always did.

The report and its helper share a private folder (made by the report, 0700, removed with the helper) and speak
through their pipes in short lines only, so that neither ever waits on the other and the report needs no thread
(it forks children for its other formats: runner/base/aside.py): the report writes each batch of charts into the
folder (`B.json`, B the number of its first chart; a JSON list of [spec, Vega-Lite version, scale]) and sends
the helper the line "B N"; the helper draws them in order, writes each PNG into the folder (`I.png`) and answers,
for each chart, its head: a byte (1: drawn, 0: it failed) and the PNG's length in 8 bytes. The report takes each PNG
when it needs it (`png(i)`) and writes every report file itself (runner/base/safewrite.py)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
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
    most); `close` ends the helper whatever state it is in and removes the folder. The helper draws in the order the
    charts were sent."""

    def __init__(self, start: bool = True) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None                    # the folder the batches and the PNGs go through
        self._sent = 0                                   # charts submitted, numbered in that order
        self._heads: list[tuple[int, int]] = []          # the answers read so far (drawn, length), in the same order
        self._pending = b""                              # answer bytes read but not yet a whole head
        self._over = False                               # no more answers will come (the helper ended, or was ended)
        self._deadline: float | None = None              # when the report stops waiting (WAIT after the first png())
        if not start:
            self._over = True
            return
        try:
            self._dir = Path(tempfile.mkdtemp(prefix="matrix-charts-"))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_root(), os.environ.get("PYTHONPATH"))
                                                               if p)}
            self._proc = subprocess.Popen([sys.executable, "-m", "runner.report.painter", str(self._dir)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          env=env)
        except OSError:
            self.close()
        except BaseException:  # Ctrl-C between the folder and the helper: neither is left behind
            self.close()
            raise

    def submit(self, jobs: Sequence[tuple[dict[str, Any], str, float]]) -> int:
        """Send these charts and return the number of the first: the i-th of them is `png(first + i)`. The batch goes
        into the folder and its name down the pipe in a line (the helper reads it when it is done with the last):
        the report never waits on the helper here."""
        first = self._sent
        self._sent += len(jobs)
        proc = self._proc
        if proc is None or proc.stdin is None or self._dir is None:
            return first
        try:
            (self._dir / f"{first}.json").write_bytes(json.dumps([list(j) for j in jobs], allow_nan=False).encode())
            proc.stdin.write(f"{first} {len(jobs)}\n".encode())
            proc.stdin.flush()
        except (OSError, TypeError, ValueError):  # the helper is gone, the disk is full, or a value JSON cannot carry:
            self.close()                           # the report draws them, and says what is wrong
        return first

    def png(self, i: int) -> bytes | None:
        if i >= self._sent:
            return None
        if self._deadline is None:
            self._deadline = time.monotonic() + WAIT
        while i >= len(self._heads) and not self._over:
            if not self._answers(max(0.0, self._deadline - time.monotonic())):
                self.close()  # a helper stuck: the charts it has not drawn are drawn in the report
        if i >= len(self._heads) or self._dir is None:
            return None
        ok, size = self._heads[i]
        if not ok:
            return None
        try:
            path = self._dir / f"{i}.png"
            body = path.read_bytes()
            path.unlink()
        except OSError:
            return None
        return body if len(body) == size and body.startswith(PNG) else None

    def _answers(self, timeout: float) -> bool:
        """Read what the helper has answered, waiting `timeout` at most for something; False where nothing came."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            self._over = True
            return True
        fd = proc.stdout.fileno()
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return False
            chunk = os.read(fd, 1 << 16)
        except (OSError, ValueError):
            chunk = b""
        if not chunk:  # the helper ended
            self._over = True
            return True
        self._take(chunk)
        return True

    def _take(self, data: bytes) -> None:
        """Heads from the helper's answer bytes; anything that is not a head ends the helper (nothing more it says
        is trusted then)."""
        self._pending += data
        while len(self._pending) >= HEAD.size:
            ok, size = HEAD.unpack(self._pending[:HEAD.size])
            if ok not in (0, 1) or size > LARGEST or len(self._heads) >= self._sent:
                self._pending = b""
                self.close()
                return
            self._heads.append((ok, size))
            self._pending = self._pending[HEAD.size:]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        self._over = True
        try:
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                for stream in (proc.stdin, proc.stdout):
                    with contextlib.suppress(OSError):
                        if stream is not None:
                            stream.close()
        finally:  # a second Ctrl-C while the helper is ended still removes the folder
            folder, self._dir = self._dir, None
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> Painter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _root() -> str:
    """The folder that holds the `runner` package: the helper imports this module from there, as the report did."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(folder: str) -> int:
    # The answers go out on a copy of stdout; whatever the engine itself prints goes to stderr, never into them.
    out: BinaryIO = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import vl_convert

    try:
        # The engine starts, with the newest Vega-Lite, while the report reads the store.
        vl_convert.vegalite_to_png(WARM, vl_version=vl_convert.get_vegalite_versions()[-1], scale=1.0)
    except Exception:  # noqa: BLE001  (a failure here is the charts' own, said when they are drawn in the report)
        pass
    where = Path(folder)
    try:
        for line in sys.stdin.buffer:  # one batch of charts per line, drawn as it comes; the report's end is EOF
            try:
                first, count = (int(x) for x in line.split())
            except ValueError:
                return 1  # not the report speaking: the report draws what it sent
            try:
                jobs = json.loads((where / f"{first}.json").read_bytes())
            except (OSError, ValueError):
                jobs = []
            for i in range(count):
                try:
                    spec, version, scale = jobs[i]
                    png = bytes(vl_convert.vegalite_to_png(spec, vl_version=version, scale=scale))
                    (where / f"{first + i}.png").write_bytes(png)
                except Exception:  # noqa: BLE001  (drawn again in the report, where its error is said)
                    out.write(HEAD.pack(0, 0))
                else:
                    out.write(HEAD.pack(1, len(png)))
                out.flush()
    except OSError:  # the report is gone (its end of the pipe closed)
        return 1
    finally:
        # However the helper ends (the report's end, or the report killed where it could not clean up), the folder
        # goes with it; a report still running draws in its own process whatever it then cannot find.
        shutil.rmtree(where, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
