"""A user's regular expressions, bounded: a pattern that backtracks without end on one line of output (a
nested quantifier such as `(a+)+$`) must not hang the launcher and then be blamed on the program as its
timeout. Python's regular expression engine checks for signals while it matches, so a timer interrupts
it. And a line longer than one read, cut where no update of a progress line is split (Updates). Standard
library only, Python 3.6 syntax.
"""

import signal
import time

LINE_S = 2.0    # one line (one \r update of it) may take this long in all of its figures' patterns
TOTAL_S = 30.0  # and every line of one repeat together this long


class Stalled(Exception):
    pass


def _alarm(signum, frame):
    raise Stalled()


class BoundedFeed(object):
    """Feeds lines to a parser with a time limit; after one is exceeded it feeds nothing more and says why
    (`problem`). Without SIGALRM (not POSIX) the lines are fed unbounded."""

    def __init__(self, parser, line_s=LINE_S, total_s=TOTAL_S):
        self.parser = parser
        self.line_s, self.total_s = line_s, total_s
        self.spent = 0.0
        self.problem = None
        self.armed = hasattr(signal, "setitimer") and parser.kind == "pattern"

    def feed(self, line):
        if self.problem is not None:
            return
        if not self.armed:
            self.parser.feed(line)
            return
        limit = min(self.line_s, max(self.total_s - self.spent, 0.001))
        previous = signal.signal(signal.SIGALRM, _alarm)
        started = time.time()
        try:
            signal.setitimer(signal.ITIMER_REAL, limit)
            self.parser.feed(line)
        except Stalled:
            self.problem = self._why(line, limit)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            self.spent += time.time() - started
        if self.problem is None and self.spent >= self.total_s:
            self.problem = self._why(line, self.total_s, every=True)

    def _why(self, line, limit, every=False):
        patterns = ", ".join("/%s/" % fig["regex"] for fig in self.parser.config.get("figures", ()))
        where = ("the program's output took more than %gs in all" % limit if every else
                 "one line of %d characters took more than %gs" % (len(line), limit))
        return ("the figures' regular expressions (%s) stopped being matched: %s (a nested quantifier such as "
                "(a+)+ backtracks without end); simplify the pattern" % (patterns, where))


class Updates(object):
    """Pieces read with readline(limit) made into lines for a parser: a line longer than the limit (a
    progress bar's \r updates without a newline) is cut at an update's start, so that no update reaches the
    parser in two halves (`12` and `34.5 img/s`)."""

    def __init__(self, emit, limit):
        self.emit, self.limit = emit, limit
        self.carry = b""

    def piece(self, raw):
        if raw.endswith(b"\n") or len(raw) < self.limit:
            self.emit(self.carry + raw)
            self.carry = b""
            return
        cut = raw.rfind(b"\r")  # a piece of a longer line: keep the update it ends in for the next piece
        if cut >= 0:
            if self.carry or cut:
                self.emit(self.carry + raw[:cut])
            self.carry = raw[cut:]
        else:
            self.carry += raw
            if len(self.carry) > self.limit:  # one update longer than a read: read in pieces after all
                self.emit(self.carry)
                self.carry = b""

    def close(self):
        if self.carry:
            self.emit(self.carry)
            self.carry = b""
