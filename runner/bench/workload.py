"""A user's own training program as one repeat: `python bench.pyz workload SPEC`.

The controller (runner/backends/workloads/) sends SPEC, one JSON argument: the argv template, the values of its
placeholders (the cell's axes, run settings, the repeat), where the workload's files are, the params to
record and the parser's configuration. Here, in the environment, the launcher fills in what only the
environment knows ({python}: this interpreter; {output}: a fresh folder for this repeat), runs the program
with its argv as a list (no shell: every value reaches it verbatim), passes all of its output through to
stderr while the parser reads it, and prints the one MATRIX_RESULT line bench prints: the parser's figures
in the store's names, the program's exit status, the environment capture. Like bench: rank 0 prints the
line, stdout carries nothing else, and the exit status is bench's (0 ok, 1 failed, 3 oom, 4 unsupported, 5 diverged:
a loss the parser read was NaN or infinite).
"""

import collections
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from . import parsers, tether
from .bounded import BoundedFeed, Updates
from .contract import EXIT_BAD_ARGS, EXIT_DIVERGED, EXIT_FAILED, EXIT_OK, EXIT_OOM, EXIT_UNSUPPORTED, SCHEMA
from .parser_matrix import MatrixParser
from .readings import loss_words

SPEC_VERSION = 1
MAX_LINE = 1 << 20  # a line longer than this (a progress bar without newlines) is read in pieces
TAIL_LINES = 40
# What an out-of-memory failure prints: PyTorch's CUDA and CPU allocators, cuBLAS, Python, HIP.
OOM_TEXT = re.compile(r"CUDA out of memory|OutOfMemoryError|HIP out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
                      r"can't allocate memory|\bMemoryError\b|out of memory", re.IGNORECASE)
STATUS_EXIT = {"ok": EXIT_OK, "failed": EXIT_FAILED, "oom": EXIT_OOM, "unsupported": EXIT_UNSUPPORTED,
               "diverged": EXIT_DIVERGED}


def say(text):
    sys.stderr.write("[workload] %s\n" % text)
    sys.stderr.flush()


def zip_home():
    """The zipapp this module runs from (so a script can `import matrix_bench`), or None from a checkout."""
    if __package__ != "matrix_bench":
        return None
    home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return home if os.path.isfile(home) else None


def expand(template, values):
    """One argv element with its placeholders filled: str.format over text values only, so a value is
    inserted as it is (a value's own braces are never read as placeholders)."""
    return template.format(**values)


def oom_reason(returncode, tail):
    """Why a failed program was out of memory, or None: the allocator's words in its last lines, or the
    SIGKILL (exit 137) the kernel's out-of-memory killer sends."""
    for line in reversed(tail):
        if OOM_TEXT.search(line):
            return line.strip()[:300]
    if returncode in (-9, 137):
        return ("killed by SIGKILL (exit status %s), as the kernel's out-of-memory killer does" %
                returncode + ("" if not any(ln.strip() == "Killed" for ln in tail) else "; it printed Killed"))
    return None


def last_line(tail):
    lines = [ln.strip() for ln in tail if ln.strip()]
    return lines[-1][:300] if lines else ""


def pump(stream, parser, tail):
    """Every line of the program's output to stderr and to the parser (None: the parser reads a log file,
    and only that: mllog writes the same lines to its stream and its file), as it comes."""
    out = getattr(sys.stderr, "buffer", None)

    def line_of(raw):
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        tail.append(line)
        if parser is not None:
            parser.feed(line)

    updates = Updates(line_of, MAX_LINE)
    while True:
        raw = stream.readline(MAX_LINE)
        if not raw:
            updates.close()
            return
        if out is not None:
            out.write(raw)
            out.flush()
        else:
            sys.stderr.write(raw.decode("utf-8", "replace"))
        updates.piece(raw)


def open_log(path):
    """(file, stat, None) or (None, None, why): the log file opened once for reading, never blocking (a FIFO in
    its place would hang the launcher, a device such as /dev/zero would never end), and trusted only as a
    regular file of this user's (or root's): another local user's file in its place is not this repeat's."""
    import stat as st_mod
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (IOError, OSError) as e:
        return None, None, "%s" % (getattr(e, "strerror", None) or e)
    f = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    why = None
    if not st_mod.S_ISREG(st.st_mode):
        why = "it is not a regular file (a FIFO, a device or a folder in its place)"
    elif hasattr(os, "getuid") and os.getuid() != 0 and st.st_uid not in (os.getuid(), 0):
        why = "it belongs to user id %d, not to this user (%d): another user's file in its place" % (
            st.st_uid, os.getuid())
    if why:
        f.close()
        return None, None, why
    return f, st, None


def _digest(f, size):
    """The sha256 of the first `size` bytes of an open file (fewer if it is shorter)."""
    import hashlib
    digest = hashlib.sha256()
    left = size
    while left > 0:
        block = f.read(min(left, 1 << 20))
        if not block:
            break
        digest.update(block)
        left -= len(block)
    return digest.hexdigest()


def file_state(path):
    """What the log file held before the program ran: (device, inode, size, sha256 of its bytes, mtime), None
    when there was none, or the reason it cannot be the program's log (read as the repeat's problem)."""
    if not os.path.lexists(path):
        return None
    f, st, why = open_log(path)
    if f is None:
        return "the log file %s cannot be read before the program runs: %s" % (path, why)
    try:
        with f:
            return (st.st_dev, st.st_ino, st.st_size, _digest(f, st.st_size), st.st_mtime_ns)
    except (IOError, OSError) as e:
        return "cannot read the log file %s (%s)" % (path, getattr(e, "strerror", None) or e)


def this_repeats_bytes(f, st, path, before):
    """(offset to read from, None) or (None, why): only what this repeat wrote is its result. A file the
    program made is read whole; one it appended to (mlperf-logging's mllog.config(filename=...) appends)
    from where it ended before; one it did not touch is not this repeat's, and a file that was there before
    and is no longer its former bytes followed by new ones (or was written again, its bytes the same) was
    rewritten: read whole."""
    if before is None or (st.st_dev, st.st_ino) != before[:2]:
        return 0, None
    size = before[2]
    if _digest(f, size) != before[3]:
        return 0, None
    if st.st_size == size:
        if st.st_mtime_ns != before[4]:
            return 0, None  # written again with the same bytes during this repeat
        return None, ("the program wrote nothing to the log file %s during this repeat (its %d bytes were there "
                      "before it started: an earlier run's, not this one's); point the parser at a file of "
                      "this repeat, e.g. {output}/log.json" % (path, size))
    return size, None


def read_file(path, parser, before):
    """Feed what this repeat wrote to the log file, up to its size when the program ended (a process still
    appending is not read without end); the problem when it wrote nothing there or the file is not its own."""
    if isinstance(before, str):
        return before
    f, st, why = open_log(path)
    if f is None:
        if not os.path.lexists(path):
            return "the program wrote no log file %s (%s)" % (path, why)
        return "the log file %s is not read: %s" % (path, why)
    try:
        with f:
            offset, problem = this_repeats_bytes(f, st, path, before)
            if problem:
                return problem
            f.seek(offset)
            left = st.st_size - offset
            updates = Updates(lambda raw: parser.feed(raw.decode("utf-8", "replace").rstrip("\r\n")), MAX_LINE)
            while left > 0:
                raw = f.readline(min(left, MAX_LINE))
                if not raw:
                    break
                left -= len(raw)
                updates.piece(raw)
            updates.close()
    except (IOError, OSError) as e:
        return "cannot read the log file %s (%s)" % (path, getattr(e, "strerror", None) or e)
    return None


def fresh_files(master, digest, into):
    """(a fresh copy of the workload's files for this repeat, None) or (None, why): every member copied
    from the placed master by its manifest (whose sha256 the controller sent), its hash checked, its own
    mode restored. What a program writes beside itself stays in this copy, removed after the repeat."""
    import hashlib
    try:
        with open(os.path.join(master, ".manifest.json"), "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != digest:
            return None, "the manifest of %s is not the one the files were placed with" % master
        rows = json.loads(data.decode("utf-8"))["members"]
        target = os.path.join(into, os.path.basename(master.rstrip("/")))
        for rel, sha, mode in rows:
            if rel.startswith("/") or ".." in rel.split("/"):
                return None, "the manifest of %s names %r, outside the folder" % (master, rel)
            with open(os.path.join(master, rel), "rb") as f:
                body = f.read()
            if hashlib.sha256(body).hexdigest() != sha:
                return None, ("workload file %s changed after it was placed (a program writing beside itself?); "
                              "run again" % os.path.join(master, rel))
            dest = os.path.join(target, rel)
            if not os.path.isdir(os.path.dirname(dest)):
                os.makedirs(os.path.dirname(dest), 0o700)
            # A new file in this repeat's private folder (mkdtemp, 0700), never through a link; its mode as the
            # source's, permission bits only (no set-id bit from a manifest).
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                os.fchmod(f.fileno(), int(mode) & 0o777)
    except (IOError, OSError, ValueError, KeyError, TypeError) as e:
        return None, "cannot copy the workload files from %s: %s" % (master, e)
    return target, None


def not_finite(metrics, figures):
    """The first figure that is infinite or not a number (a result's JSON would store it as nothing)."""
    import math
    for name in ("throughput", "window_s", "images", "loss_end", "accuracy", "peak_mem_allocated", "images_per_joule"):
        value = metrics.get(name)
        if isinstance(value, float) and not math.isfinite(value):
            return name, value
    for name, value in list(metrics.items()) + [(n, (f or {}).get("value")) for n, f in figures.items()]:
        if isinstance(value, float) and not math.isfinite(value):
            return name, value
    return None


def device_for(values):
    """The device to describe in the environment capture: the cell's `device` axis, else a GPU when there is one."""
    from .compat import torch
    if torch is None:
        return None
    wanted = values.get("device")
    if wanted == "cpu" or (wanted != "cuda" and not torch.cuda.is_available()):
        return torch.device("cpu")
    index = int(os.environ.get("LOCAL_RANK", "0") or 0)
    return torch.device("cuda", index % max(torch.cuda.device_count(), 1))


def capture(values):
    """The environment capture, taken after the program ended (its import of torch and a CUDA context
    never compete with the program for memory)."""
    from . import envinfo
    try:
        device = device_for(values)
    except Exception as e:
        say("cannot choose the device to describe: %s" % e)
        device = None
    try:
        return envinfo.capture_env(device)
    except Exception as e:
        say("environment capture failed: %s" % e)
        return {"capture_error": str(e)}


def judge(returncode, found, tail, parser):
    """(status, reason) of the repeat from the program's exit status and what the parser found. A loss the parser
    read that was NaN or infinite makes it `diverged`, as bench's own training would be, whatever else went wrong
    after it (a program that stops on a NaN loss), out of memory excepted."""
    child = parser.result if isinstance(parser, MatrixParser) else None
    diverged = loss_words(found.get("losses"))
    if returncode != 0:
        oom = oom_reason(returncode, tail)
        if oom:
            return "oom", oom
        if diverged:
            return "diverged", "%s; the program then exited with status %d" % (diverged, returncode)
        if child and child.get("status") in ("oom", "unsupported", "failed", "diverged"):
            return child["status"], child.get("reason") or "exit status %d" % returncode
        if returncode < 0:
            return "failed", "the program was killed by signal %d: %s" % (-returncode, last_line(tail))
        return "failed", "the program exited with status %d: %s" % (returncode, last_line(tail))
    if child and child.get("status") not in (None, "ok"):
        return str(child["status"]), child.get("reason") or ""
    if diverged:
        return "diverged", "%s parser: %s" % (parser.kind, diverged)
    if found["problem"]:
        return "failed", "%s parser: %s; last line: %s" % (parser.kind, found["problem"], last_line(tail))
    return "ok", None


def build_result(spec, parser, found, status, reason, returncode, argv, seconds, values):
    """The result in bench's schema: the figures in the store's names, the program's facts under workload."""
    metrics = {"throughput": None, "window_s": None, "images": None, "iter_times": [], "data_wait_s": None,
               "loss_start": None, "loss_end": None, "accuracy": None, "peak_mem_allocated": None,
               "peak_mem_reserved": None, "device_mem_used": None, "host_peak_rss": None, "breakdown": None,
               "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1), "energy_j": None, "images_per_joule": None}
    child = parser.result if isinstance(parser, MatrixParser) else None
    if child:
        metrics.update(child.get("metrics") or {})
    for name, value in found["metrics"].items():
        field = parsers.STORE_FIELDS.get(name, name)
        metrics[field] = [value] if field == "iter_times" else value
    if found["figures"]:
        metrics["figures"] = found["figures"]
    if found.get("definitions"):
        metrics["definitions"] = found["definitions"]
    if found.get("resolution"):  # the printed resolution of each figure (docs/admission.md)
        metrics["resolution"] = found["resolution"]
    if found.get("losses"):  # every loss the parser read, summarised: admission judges them (docs/admission.md)
        metrics["loss_seen"] = found["losses"]
    try:
        import resource
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        metrics["host_peak_rss"] = int(rss * 1024 if sys.platform != "darwin" else rss)
    except Exception:
        pass
    env = (child or {}).get("env") or capture(values)
    env["launcher_python"] = sys.executable
    # What `matrix diff` and bisect compare: the command that ran, and (as bench records it) the packages and
    # the variables that steer the libraries, which the program inherited from this process.
    env["workload_argv"] = " ".join(shlex.quote(a) for a in argv)
    if "software" not in env:
        from . import envinfo
        envinfo.add_software(env)
    return {"schema": SCHEMA, "status": status, "reason": reason, "params": spec.get("params") or {},
            "metrics": metrics, "precision": (child or {}).get("precision"), "env": env,
            "workload": {"name": spec.get("name"), "parser": parser.kind, "argv": argv, "returncode": returncode,
                         "program_s": seconds, "found": found["notes"],
                         "script": (child or {}).get("workload")}}


def run_program(argv, env, parser, feed, tail):
    """Start the program, pass its output through (to `feed`, the parser with its time bound), return its exit
    status (None: it could not start). The program dies with this launcher (tether.py) and is given a SIGTERM
    this launcher gets (tether.pass_sigterm)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, close_fds=True, preexec_fn=tether.preexec(os.getpid()))
    except (IOError, OSError) as e:
        tail.append("cannot start %s: %s" % (argv[0] if argv else "(empty argv)", getattr(e, "strerror", None) or e))
        return None
    restore = tether.pass_sigterm(proc, say)
    try:
        pump(proc.stdout, None if parser.config.get("file") else feed, tail)
    finally:
        proc.stdout.close()
    code = proc.wait()
    restore()
    return code


def main(args):
    if len(args) != 1:
        say("usage: bench.pyz workload SPEC_JSON")
        return EXIT_BAD_ARGS, None
    try:
        spec = json.loads(args[0])
        if not isinstance(spec, dict) or spec.get("v") != SPEC_VERSION:
            raise ValueError("spec version %r, this launcher reads %d" % (
                spec.get("v") if isinstance(spec, dict) else None, SPEC_VERSION))
    except ValueError as e:
        say("bad workload spec: %s" % e)
        return EXIT_BAD_ARGS, None
    rank = int(os.environ.get("RANK", "0") or 0)
    output = tempfile.mkdtemp(prefix="matrix-workload-")
    copies = tempfile.mkdtemp(prefix="matrix-files-")
    try:
        values = dict(spec.get("values") or {})
        files, problem = (fresh_files(spec["files"], spec.get("files_manifest"), copies) if spec.get("files")
                          else ("", None))
        values.update(python=sys.executable, output=output, files=files or "")
        try:
            argv = [expand(t, values) for t in spec["argv"]]
            config = dict(spec["parser"])
            if config.get("file"):
                config["file"] = expand(config["file"], values)
            parser = parsers.make(config)
        except (KeyError, IndexError, ValueError, re.error) as e:
            say("cannot build the command: %s: %s" % (type(e).__name__, e))
            return EXIT_BAD_ARGS, None
        env = dict(os.environ)
        home = zip_home()
        if home:
            env["PYTHONPATH"] = home + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["MATRIX_WORKLOAD_OUTPUT"] = output
        tail = collections.deque(maxlen=TAIL_LINES)
        say("running %s" % " ".join(repr(a) if (" " in a or not a) else a for a in argv))
        before = file_state(config["file"]) if config.get("file") else None
        if isinstance(before, str) and not problem:  # a FIFO or another user's file where the log goes
            problem = before
        bounded = BoundedFeed(parser)
        started = time.time()
        if problem:
            tail.append(problem)
        returncode = run_program(argv, env, parser, bounded, tail) if not problem else None
        seconds = time.time() - started
        if returncode is None:
            status, reason = "failed", last_line(tail)
            found = {"metrics": {}, "figures": {}, "notes": {}, "problem": reason, "definitions": {}}
        else:
            problem = read_file(config["file"], bounded, before) if config.get("file") else None
            found = parser.outcome()
            if problem or bounded.problem:
                found["problem"] = bounded.problem or problem
            status, reason = judge(returncode, found, list(tail), parser)
        if rank != 0:  # rank 0 reads the figures (programs log from one process); here only the ending counts
            return (EXIT_OK if returncode == 0 else STATUS_EXIT.get(status, EXIT_FAILED)), None
        result = build_result(spec, parser, found, status, reason, returncode, argv, seconds, values)
        bad = not_finite(result["metrics"], found["figures"]) if result["status"] == "ok" else None
        if bad:  # JSON would keep it as null: an `ok` without its figure
            result["status"], status = "failed", "failed"
            result["reason"] = "%s parser: %s is %r, not a finite number" % (parser.kind, bad[0], bad[1])
        return STATUS_EXIT.get(status, EXIT_FAILED), result
    finally:
        shutil.rmtree(output, ignore_errors=True)
        shutil.rmtree(copies, ignore_errors=True)


def run(argv=None):
    """The process entry: the launcher's exit status, the result line on rank 0, then exit at once."""
    args = sys.argv[2:] if argv is None else argv
    code, result = main(args)
    if tether.STOPPED:  # stopped from outside: no result, and the status a SIGTERM gives, as if it had died of it
        result, code = None, 128 + 15
    if result is not None:
        from .result import result_line
        sys.stdout.write(result_line(result) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
