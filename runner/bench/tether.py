"""A rank dies with the process that started it, and the programs a rank starts die with the rank.

A batch scheduler stops a step by signalling the processes it tracks. Slurm's proctrack/linuxproc (and
proctrack/pgid) finds them through their parents: when the shell that started a rank dies first, the rank
is handed to init and nothing tracks it any more. A timed-out or cancelled repeat then keeps computing on
its node, beside the repeats that come after it. Linux's PR_SET_PDEATHSIG closes that gap: the kernel
kills the child the moment its parent exits, whatever killed the parent.

- `from_environment()`: the job script names the shell that starts this rank and its PID namespace
  (MATRIX_TETHER="$$ pid:[...]"); the rank asks to be killed when that shell exits. In another namespace
  (a container runtime that passed the variable on) it does nothing, and a different parent disarms it:
  the rank is then not the shell's child, and its runtime is what stops it.
- `preexec(parent)`: for a program the rank starts (a user's workload); the child dies with the rank. The
  signal follows the *thread* that started the child, so call it from the thread that waits.
- `pass_sigterm(proc, say)`: a launcher asked to stop (SIGTERM) passes it on to its program and waits for it, at
  most STOP_GRACE_S, instead of dying at once and taking the program with it mid-handler.

Elsewhere than Linux the first two do nothing. Standard library only, Python 3.6 syntax.
"""

import os
import signal
import threading
import time

ENV = "MATRIX_TETHER"
PR_SET_PDEATHSIG = 1


def _prctl():
    """libc's prctl, or None where there is none (not Linux, no ctypes)."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None


def arm(parent, prctl=None, getppid=os.getppid):
    """Ask to be killed when `parent` exits. Returns 'armed', 'gone' (the parent exited before the call: the
    caller should stop) or 'other' (this process's parent is not `parent`: disarmed), or None (no prctl)."""
    prctl = _prctl() if prctl is None else prctl
    if prctl is None:
        return None
    try:
        if prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL)) != 0:
            return None
    except Exception:
        return None
    ppid = getppid()
    if ppid == parent:
        return "armed"
    try:
        prctl(PR_SET_PDEATHSIG, 0)
    except Exception:
        pass
    # Re-parented to init or a subreaper once `parent` exited: either way `parent` is gone.
    try:
        os.kill(parent, 0)
    except OSError as e:
        if getattr(e, "errno", None) == 3:  # ESRCH: no such process
            return "gone"
    return "other"


def pid_namespace():
    try:
        return os.readlink("/proc/self/ns/pid")
    except (OSError, AttributeError):
        return None


def from_environment(environ=None, prctl=None, getppid=os.getppid, namespace=pid_namespace):
    """At the rank's start: die with the shell named in MATRIX_TETHER (removed from the environment, so the
    programs this rank starts do not read it). A shell that is already gone ends the rank at once."""
    environ = os.environ if environ is None else environ
    words = (environ.pop(ENV, None) or "").split(" ", 1)
    if len(words) != 2 or not words[0].isdigit() or words[1] != namespace():
        return None  # not named, or named from another PID namespace: that number is not this rank's parent
    state = arm(int(words[0]), prctl, getppid)
    if state == "gone":
        os._exit(143)  # as if the signal that killed the shell had reached this rank: 128 + SIGTERM
    return state


def preexec(parent):
    """A Popen preexec_fn: the child is killed when `parent` (the caller's pid) exits; a child whose parent is
    already gone exits before it runs anything."""
    prctl = _prctl()

    def tether_child():
        if prctl is not None and arm(parent, prctl) == "gone":
            os._exit(143)

    return tether_child


STOP_GRACE_S = 20.0  # how long a program asked to stop (SIGTERM) may take to end before it is killed
STOPPED = []  # set when this launcher was asked to stop: it then prints no result (the scheduler's state says why)


def pass_sigterm(proc, say):
    """While the program runs, a SIGTERM (a time limit, scancel) is passed on to it and the launcher waits for it
    to end, at most STOP_GRACE_S, then kills it. Without this the launcher would die at once and its tether
    (above) would SIGKILL the program in the middle of its own SIGTERM handler (a checkpoint, a log's last
    lines), and a launcher such as torchrun could not stop its workers. Returns what puts the handler before it
    back."""
    def kill():
        try:
            proc.kill()
        except OSError:
            pass

    def on_term(signum, frame):
        if STOPPED:
            return
        STOPPED.append(time.time())
        say("asked to stop (SIGTERM): passing it on to the program, which has %gs to end" % STOP_GRACE_S)
        try:
            proc.send_signal(signal.SIGTERM)
        except OSError:
            pass
        timer = threading.Timer(STOP_GRACE_S, kill)
        timer.daemon = True
        timer.start()

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: the default (die at once) stays
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, previous)
