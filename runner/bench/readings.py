"""Numbers as programs print them, for the workload parsers (parsers.py). Standard library only, Python 3.6
syntax."""

import json
import math
import re


def number(value):
    """A finite float from a logged value (numbers, numeric strings), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if math.isfinite(found) else None


def reading(value):
    """A logged value as a float, a NaN or an infinity kept as such (None: not a number at all): a figure the
    program logged as NaN (a diverged loss) must fail the repeat, never be skipped for an earlier finite one."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def loss_reading(value):
    """A logged loss as reading() takes it, and a null (None) as NaN: where a loss is expected a null is what a strict
    JSON encoder (orjson) writes for a NaN or an infinity, never 'no loss'. None: not a loss at all."""
    return math.nan if value is None else reading(value)


THOUSANDS = {".": re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d*)?$"), ",": re.compile(r"^[-+]?\d{1,3}(\.\d{3})+(,\d*)?$")}


def read_number(text, decimal=".", finite=True):
    """(value, None) or (None, why) for a number as a program printed it, by the figure's stated decimal
    mark: with `.`, commas may only group thousands (1,234,567.5); with `,`, points may only group them
    (1.234.567,5). Anything else that holds the other mark (1234,5 with `.`) is ambiguous, never guessed.
    With finite=False a NaN or an infinity is returned as the value (for the caller to refuse by name)."""
    text = text.strip()
    other = "," if decimal == "." else "."
    if re.match(r"^[-+]?\d[\d.,]*$", text) and text.count(decimal) > 1:
        return None, ("%r, which holds the figure's decimal mark %r twice: ambiguous, not guessed (set decimal: "
                      "%r if the program writes 1%s234%s5)" % (text, decimal, other, decimal, other))
    if other in text:
        if not THOUSANDS[decimal].match(text):
            return None, ("%r, where %r cannot be a thousands separator and the figure's decimal mark is %r: "
                          "ambiguous, not guessed (set decimal: %r if the program writes 1234%s5)"
                          % (text, other, decimal, other, other))
        text = text.replace(other, "")
    if decimal == ",":
        text = text.replace(",", ".")
    try:
        value = float(text)
    except ValueError:
        return None, "%r, which is not a number" % text
    if finite and not math.isfinite(value):
        return None, "%r, which is not a finite number" % text
    return value, None


def mean(values):
    return sum(values) / len(values) if values else None


class Printed(float):
    """A number read from a program's text, with the resolution its digits had (`quantum`): "12.30" is 12.3 to the
    hundredth. The controller treats the resolution as part of the figure's uncertainty (docs/admission.md)."""

    __slots__ = ("quantum",)


def quantum_of(text):
    """The resolution of a number as printed: 10 to the power of its last digit's place ("12.34" 0.01, "1.2e3"
    100, "4663" 1); 0 when the text is not a plain decimal number."""
    t = str(text).strip().lower().lstrip("+-").replace(",", "")
    mantissa, _, exponent = t.partition("e")
    try:
        power = int(exponent) if exponent else 0
    except ValueError:
        return 0.0
    whole, _, decimals = mantissa.partition(".")
    if not (whole + decimals).isdigit():
        return 0.0
    return 10.0 ** (power - len(decimals))


def printed(text):
    """A float that remembers the resolution of its text (json's parse_float hook)."""
    value = Printed(text)
    value.quantum = quantum_of(text)
    return value


def quantum(value):
    """The resolution a parsed value was printed at: a Printed float's, 1 for an integer, 0 when unknown."""
    if isinstance(value, Printed):
        return value.quantum
    if isinstance(value, int) and not isinstance(value, bool):
        return 1.0
    return 0.0


def json_after(line, mark):
    """The JSON object that follows `mark` in a line (a launcher or logging prefix may precede it); its decimal
    numbers keep the resolution they were printed at (Printed)."""
    at = line.find(mark)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(mark):].strip(), parse_float=printed)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


# A figure outside its metric's domain is a wrong pattern or a wrong log, never a result: a rate or a time per
# step is above zero; a count, a memory size or a window not below it (a window logged in whole milliseconds
# may be 0: shorter than the log's resolution).
POSITIVE = ("throughput", "iter_time", "images_per_joule")
NOT_NEGATIVE = ("images", "window_s", "peak_mem", "peak_mem_allocated", "peak_mem_reserved")


def out_of_domain(metrics, figures):
    """Why a figure cannot be what the program measured (NaN, infinite, a rate at or below zero), or None."""
    for name, value in sorted(metrics.items()) + sorted((n, (f or {}).get("value")) for n, f in figures.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value):
            return ("%s is %r: the program logged a figure that is not a finite number (a diverged loss, a "
                    "timer that failed); it is never skipped for an earlier value" % (name, value))
        if name in POSITIVE and value <= 0:
            return "%s is %r: a rate or a time per step is above zero; the pattern or the log is wrong" % (name, value)
        if name in NOT_NEGATIVE and value < 0:
            return "%s is %r: a count, a size or a window is not negative; the pattern or the log is wrong" % (
                name, value)
    return None


# The keys programs log their figures under (DeepLearningExamples' DLLogger, MLPerf's mllog), per store metric.
DLLOGGER_KEYS = {
    "throughput": ("throughput_train", "train.total_ips", "train_throughput", "throughput", "total_ips",
                   "train.compute_ips", "ips"),
    "accuracy": ("val.top1", "eval_accuracy", "accuracy", "top1", "val.accuracy"),
    "loss_end": ("train.loss", "train_loss", "loss", "final_loss"),
    "window_s": ("train.total_time", "total_time", "train_time", "training_time"),
}
MLLOG_LOSS_KEYS = ("loss", "train_loss", "reduced_train_loss")
# DLLogger METADATA time units -> seconds (a total time logged in another unit is refused, not taken as seconds).
DLLOG_TIME_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "seconds": 1.0, "ms": 1e-3, "milliseconds": 1e-3,
                    "min": 60.0, "minutes": 60.0, "h": 3600.0, "hours": 3600.0}


NULL = "null"  # LossSeen's word for a loss logged as JSON null (a NaN or an infinity a strict encoder wrote)


class LossSeen(object):
    """Every loss a program's output gave, in the order given, summarised for admission (docs/admission.md): how many,
    the first that was not finite (its place among them, and what it was: the result's strict JSON cannot hold a NaN),
    the first and the last finite one and the largest in magnitude. A long run logs a loss per step: the summary, not
    the list, travels in the result (`metrics.loss_seen`)."""

    def __init__(self, source=""):
        self.source = source   # where the losses were read, in words: "mllog: tracked_stats loss"
        self.count = 0
        self.nonfinite = 0
        self.first_nonfinite_at = None
        self.first_nonfinite = None
        self.finite_before = None  # the last finite loss before the first that was not
        self.first = self.first_at = self.last = self.largest = self.largest_at = None

    def add(self, value):
        """One more loss (a number, a numeric string or a 0-d tensor; anything else is no loss). None is a loss that
        was logged as null where a loss is expected: strict JSON encoders (orjson, json with allow_nan off) write a
        NaN or an infinity so, and no format matrix reads documents null as 'no loss this step', so it is a loss
        that was not finite. A caller with no loss to give does not call add."""
        if isinstance(value, bool):
            return
        if value is None:
            value, shown = math.nan, NULL
        else:
            try:
                value = float(value)
            except (TypeError, ValueError):
                return
            shown = repr(value)
        self.count += 1
        if not math.isfinite(value):
            self.nonfinite += 1
            if self.first_nonfinite_at is None:
                self.first_nonfinite_at, self.first_nonfinite = self.count, shown
                self.finite_before = self.last
            return
        if self.first is None:
            self.first, self.first_at = value, self.count
        self.last = value
        if self.largest is None or abs(value) > abs(self.largest):
            self.largest, self.largest_at = value, self.count

    def record(self):
        """metrics.loss_seen, or None when no loss was seen."""
        if not self.count:
            return None
        return {"count": self.count, "from": self.source, "nonfinite": self.nonfinite,
                "first_nonfinite_at": self.first_nonfinite_at, "first_nonfinite": self.first_nonfinite,
                "finite_before": self.finite_before, "first": self.first, "first_at": self.first_at, "last": self.last, "largest": self.largest,
                "largest_at": self.largest_at}


def ordinal(n):
    """1st, 2nd, 3rd, 4th, 11th, 22nd."""
    if 10 <= n % 100 <= 20:
        return "%dth" % n
    return "%d%s" % (n, {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


def loss_words(record):
    """A loss record's non-finite loss in words, bench's reason for a diverged training ("loss became nan at the 2nd
    of the 4 losses read (mllog: tracked_stats loss); last finite loss 1.9"), or None when every loss was finite."""
    if not record or not record.get("nonfinite"):
        return None
    at, count = record["first_nonfinite_at"], record["count"]
    what = record.get("first_nonfinite") or "NaN or infinite"
    if what == NULL:
        what = "null (NaN or infinite, as strict JSON writes it)"
    text = "loss became %s at the %s of the %d loss%s read%s" % (
        what, ordinal(at), count, "" if count == 1 else "es",
        " (%s)" % record["from"] if record.get("from") else "")
    before = record.get("finite_before")
    return text + ("; last finite loss %.4g before it" % before if isinstance(before, (int, float)) else
                   "; no finite loss before it")


def text_quantum(text, decimal="."):
    """The resolution of a number as the program printed it, by the figure's decimal mark (1.234,5 with ",")."""
    t = text.strip()
    t = t.replace(".", "").replace(",", ".") if decimal == "," else t.replace(",", "")
    return quantum_of(t)
