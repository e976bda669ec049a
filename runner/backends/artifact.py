"""The benchmark as one file: runner/bench/ zipped into a zipapp that any Python from 3.6 on runs as
`python3 bench-<hash>.pyz ARGS` (Python runs a zip file's __main__.py).

The zip is built deterministically (entries sorted, fixed timestamps and modes, stored uncompressed),
so the same sources give the same bytes, and the name carries their hash: a file of that name is that
benchmark, wherever it lies. Every backend ships these bytes as they are: the local backend runs the
copy in the cache, the docker backend puts it into the container, the slurm backend writes it into
the results directory its jobs read.

    python -m runner.backends.artifact [DIR]    # write the zipapp into DIR (default: the cache) and print its path
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path

from runner.base import safewrite

SOURCE = Path(__file__).resolve().parents[1] / "bench"
PACKAGE = "matrix_bench"  # the package's name inside the zip: distinct from anything an image installs
MAIN = (b'"""matrix\'s benchmark as one file: python3 bench.pyz ARGS, or python3 bench.pyz workload SPEC for a\n'
        b'user\'s own program (docs/internals.md, docs/workloads.md)."""\n'
        b"import sys\n\nfrom matrix_bench import tether\n\ntether.from_environment()  # before torch loads: die with the job's shell\n"
        b"if sys.argv[1:2] == [\"workload\"]:\n    from matrix_bench.workload import run\n"
        b"else:\n    from matrix_bench.main import run\nrun()\n")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry


def sources() -> list[Path]:
    """The benchmark's modules, in the order they are zipped."""
    return sorted(SOURCE.glob("*.py"))


@cache
def payload() -> bytes:
    """The zipapp's bytes: __main__.py, then the package's modules."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        entries = [("__main__.py", MAIN)] + [(f"{PACKAGE}/{p.name}", p.read_bytes()) for p in sources()]
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.create_system = 3  # unix, so the mode below is read as one
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_STORED
            zf.writestr(info, data)
    return buf.getvalue()


def name() -> str:
    """bench-<first 12 hex digits of the zip's sha256>.pyz"""
    return f"bench-{hashlib.sha256(payload()).hexdigest()[:12]}.pyz"


def install(folder: Path) -> Path:
    """The zipapp in `folder`, written there (runner/base/safewrite.py: whole, never through a link) unless a file of
    the same bytes already is. What is at its name is checked before it is read or trusted: a link (to a file of
    the same bytes that its owner may change later), a FIFO or another user's file is refused (UnsafePath, an
    OSError: `path` then falls back to a private folder)."""
    data = payload()
    target = folder / name()
    safewrite.check(target)
    try:
        with safewrite.open_regular(target, nofollow=True) as f:  # not through a link planted after the check
            if f.read(len(data) + 1) == data:
                return target
    except OSError:
        pass
    folder.mkdir(parents=True, exist_ok=True)
    return safewrite.write_bytes(target, data, mode=0o644)


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/matrix, else ~/.cache/matrix."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "matrix"


_fallback: list[Path] = []


def path() -> Path:
    """The zipapp on this host, for a process to run: in the cache, or where the cache cannot be
    written, in a private temporary folder of this process."""
    try:
        return install(cache_dir())
    except OSError:
        if not _fallback:
            _fallback.append(Path(tempfile.mkdtemp(prefix="matrix-bench-")))
        return install(_fallback[0])


if __name__ == "__main__":
    print(install(Path(sys.argv[1])) if len(sys.argv) > 1 else path())
