"""What matrix puts into a container and runs there with the image's own python (3.6 in 2018
images): the benchmark's zipapp, the kill helper, the interpreter probe, and a workload's files."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Sequence

from runner.backends import artifact
from runner.backends.workloads.files import FileEntry, owner_ids, tar_members

INSIDE = "/tmp/matrix"  # where the benchmark and the helper land in the container
BENCH_IN = f"{INSIDE}/bench.pyz"
KILLER_IN = f"{INSIDE}/kill_task.py"
TASK_VAR = "MATRIX_TASK"  # marks every process of one repeat, so it can be found and killed

# SIGKILLs every process whose environment carries the task's mark, children included, since
# `exec` itself has no timeout or kill.
KILLER = b'''import os, signal, sys
mark = ("%s=" % sys.argv[1]).encode() + sys.argv[2].encode()
me = os.getpid()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            env = f.read().split(b"\\0")
    except (IOError, OSError):
        continue
    if mark in env:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
'''

# Where is python, which version, is torch importable (found, not imported: importing costs ~2 s).
PROBE = ('import sys\nprint(sys.executable)\nprint("%d.%d.%d" % tuple(sys.version_info[:3]))\n'
         'try:\n    import importlib.util as u\n    print("torch" if u.find_spec("torch") else "no-torch")\n'
         'except Exception:\n    print("unknown")\n')
IDLE_PY = "import time\nwhile True:\n    time.sleep(3600)\n"
# What keeps the container alive between repeats, tried in order.
IDLE_COMMANDS = (["sleep", "infinity"], ["python3", "-c", IDLE_PY], ["python", "-c", IDLE_PY])


def payload(files: Sequence[FileEntry] = (), user: str | None = None) -> bytes:
    """The benchmark's zipapp, the kill helper and a workload's files (INSIDE/files-HASH, owned by `user`, the
    environment's `user:` the launcher runs as) as a tar for put_archive (the /tmp entry itself is left alone).
    Raises workloads.Changed for an edited file."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folder = tarfile.TarInfo(INSIDE.lstrip("/"))
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, now
        tar.addfile(folder)
        for name, data in ((BENCH_IN, artifact.payload()), (KILLER_IN, KILLER)):
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(info, io.BytesIO(data))
        if files:
            tar_members(tuple(files), INSIDE, tar, now, owner_ids(user))
    return buf.getvalue()
