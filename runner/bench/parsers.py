"""What a workload's output says: its figures of merit read line by line, in the environment, by the
workload launcher (workload.py). Standard library only, Python 3.6 syntax.

Each parser takes the configuration the controller normalised (runner/backends/workloads/config.py), is fed every
line the program printed (stdout and stderr, as one stream) and, when the program wrote its log to a
file, that file's lines after it ended. `outcome()` returns the metrics in the store's own names and
units, the figures of the user's own naming, what was found, and the problem when a required figure
is missing: a result without its figure is `failed`, never a zero. Every loss a parser reads goes to `loss()`:
the result carries their summary (`metrics.loss_seen`), a non-finite one makes the repeat `diverged`, and admission
judges them again (docs/admission.md).

  mllog     MLPerf logging lines `:::MLLOG {json}` (mlperf-logging's mllog)
  dllogger  DLLogger JSON lines `DLLL {json}` (NVIDIA DeepLearningExamples)
  pattern   named figures by regular expression, each with a unit, a scale and a direction
  matrix    the `MATRIX_RESULT` line a script prints through matrix_bench.measure
"""

import math
import re

from .parsing import KIND_RE, PARSERS, Parser, known_kinds, make, register  # noqa: F401  (the kinds' one door)
from .readings import (
    DLLOG_TIME_UNITS,
    DLLOGGER_KEYS,
    MLLOG_LOSS_KEYS,
    json_after,
    loss_reading,
    mean,
    number,
    quantum,
    read_number,
    reading,
    text_quantum,
)

MLLOG_MARK = ":::MLLOG "
DLLOG_MARK = "DLLL "

# Where a store metric goes in the result's metrics (the names runner/analysis/frame.py reads).
STORE_FIELDS = {"throughput": "throughput", "window_s": "window_s", "iter_time": "iter_times",
                "peak_mem": "peak_mem_allocated", "loss_end": "loss_end", "accuracy": "accuracy",
                "images_per_joule": "images_per_joule", "images": "images"}

# The unit a store metric other than throughput is shown in, whatever the program printed (converted).
SHOWN_UNITS = {"window_s": "s", "iter_time": "ms", "peak_mem": "MiB", "accuracy": "", "loss_end": "",
               "images_per_joule": "img/J"}

@register
class MllogParser(Parser):
    """MLPerf logging: run_start/run_stop (time to train), tracked_stats throughput (the first `skip` records
    are warm-up), train_samples, eval_accuracy, the loss in tracked_stats, run_stop's status."""

    kind = "mllog"

    def __init__(self, config):
        Parser.__init__(self, config)
        self.run_start = None
        self.run_stop = None
        self.stop_status = None
        self.throughputs = []
        self.throughput_quanta = []
        self.losses = []
        self.loss_quantum = 0.0
        self.accuracy = None
        self.accuracy_quantum = 0.0
        self.train_samples = None
        self.logged = {}

    def feed(self, line):
        Parser.feed(self, line)
        if MLLOG_MARK not in line:
            return
        event = json_after(line, MLLOG_MARK)
        if event is None or "key" not in event:
            return
        self.records += 1
        key, value = event.get("key"), event.get("value")
        metadata = event.get("metadata") if isinstance(event.get("metadata"), dict) else {}
        time_ms = number(event.get("time_ms"))
        if key == "run_start" and self.run_start is None:
            self.run_start = time_ms
        elif key == "run_stop":
            self.run_stop = time_ms
            self.stop_status = metadata.get("status")
        elif key == "tracked_stats" and isinstance(value, dict):
            raw = value.get(self.config.get("throughput_key") or "throughput")
            throughput = reading(raw)
            if throughput is not None:
                self.throughputs.append(throughput)
                self.throughput_quanta.append(quantum(raw))
            # Every loss key the record holds is judged (a null one is a NaN a strict encoder wrote); the first
            # is the run's loss (loss_end).
            kept = [name for name in MLLOG_LOSS_KEYS if name in value and loss_reading(value[name]) is not None]
            for name in kept:
                if name == kept[0]:
                    self.losses.append(loss_reading(value[name]))
                    self.loss_quantum = quantum(value[name])
                self.loss(value[name], "mllog: tracked_stats %s" % name)
        elif key in MLLOG_LOSS_KEYS and loss_reading(value) is not None:  # a loss logged as its own event
            self.losses.append(loss_reading(value))
            self.loss_quantum = quantum(value)
            self.loss(value, "mllog: %s events" % key)
        elif key == "eval_accuracy" and reading(value) is not None:
            self.accuracy = reading(value)
            self.accuracy_quantum = quantum(value)
        elif key in ("train_samples", "trained_samples") and number(value) is not None:
            self.train_samples = number(value)
        elif key in ("global_batch_size", "submission_benchmark", "submission_division", "seed",
                     "gradient_accumulation_steps"):
            self.logged[key] = value

    def measured(self):
        skip = int(self.config.get("skip", 1))
        metrics = {}
        notes = {"logged": self.logged, "tracked_throughputs": len(self.throughputs), "skip": skip}
        if self.run_start is not None and self.run_stop is not None and self.run_stop >= self.run_start:
            metrics["window_s"] = (self.run_stop - self.run_start) / 1000.0
        kept = self.throughputs[skip:]
        problem = None
        key = self.config.get("throughput_key") or "throughput"
        if kept:
            metrics["throughput"] = mean(kept)
            self.resolution["throughput"] = max(self.throughput_quanta[skip:])  # a mean of rounded figures
            notes["throughput_from"] = "tracked_stats (mean of %d records after the first %d)" % (len(kept), skip)
            self.definitions["throughput"] = {"how": "mllog: mean of tracked_stats %s after the first %d records"
                                                     % (key, skip), "unit": "samples/s"}
        elif self.throughputs:
            problem = ("%d tracked_stats throughput record%s, all discarded as warm-up (skip: %d): log more "
                       "of them, or set skip: 0 in the parser" % (len(self.throughputs),
                                                                  "s" if len(self.throughputs) != 1 else "", skip))
        elif self.train_samples and metrics.get("window_s"):
            metrics["throughput"] = self.train_samples / metrics["window_s"]
            # time_ms in whole milliseconds: the window to 1 ms, the rate to what that moves it by
            self.resolution["throughput"] = self.train_samples * 0.001 / metrics["window_s"] ** 2
            notes["throughput_from"] = "train_samples / (run_stop - run_start)"
            self.definitions["throughput"] = {"how": "mllog: train_samples / (run_stop - run_start)",
                                              "unit": "samples/s"}
        if "window_s" in metrics:
            self.definitions["window_s"] = {"how": "mllog: run_stop - run_start", "unit": "s"}
        if self.train_samples is not None:
            metrics["images"] = self.train_samples
        if self.accuracy is not None:
            metrics["accuracy"] = self.accuracy
            self.resolution["accuracy"] = self.accuracy_quantum
            self.definitions["accuracy"] = {"how": "mllog: last eval_accuracy", "unit": ""}
            if math.isfinite(self.accuracy) and not 0 <= self.accuracy <= 1:
                problem = ("eval_accuracy %s is not a fraction between 0 and 1 (MLPerf logs a fraction; a "
                           "percentage is not taken as one)" % self.accuracy)
        if self.losses:
            metrics["loss_end"] = self.losses[-1]
            self.resolution["loss_end"] = self.loss_quantum
            self.definitions["loss_end"] = {"how": "mllog: last tracked_stats loss", "unit": ""}
        if self.stop_status is not None and str(self.stop_status).lower() != "success":
            problem = "run_stop says status %r (the run did not succeed)" % (self.stop_status,)
        return metrics, {}, notes, problem


@register
class DlloggerParser(Parser):
    """DLLogger's JSON stream: a metric from the summary record (step []) when there is one, else the
    mean of its per-step values after the first `skip` (throughput) or the last one (the others)."""

    kind = "dllogger"

    def __init__(self, config):
        Parser.__init__(self, config)
        self.summary = {}
        self.series = {}
        self.series_quanta = {}
        self.units = {}
        self.parameters = {}

    def feed(self, line):
        Parser.feed(self, line)
        if DLLOG_MARK not in line:
            return
        record = json_after(line, DLLOG_MARK)
        if record is None:
            return
        self.records += 1
        kind = record.get("type")
        if kind == "METADATA":
            meta = record.get("metadata")
            if isinstance(meta, dict) and meta.get("unit") is not None:
                self.units[str(record.get("metric"))] = str(meta.get("unit"))
            return
        data = record.get("data")
        if kind != "LOG" or not isinstance(data, dict):
            return
        step = record.get("step")
        if step == "PARAMETER":
            self.parameters.update(data)
        elif step in ([], (), None, ""):
            self.summary.update(data)
        else:
            losses = self.loss_keys()
            for key, value in data.items():
                # A loss key's null is kept as None: a loss that was not finite (a strict encoder's NaN), which
                # keep_losses hands on as such; another key's null is no value.
                if reading(value) is not None or (value is None and key in losses):
                    self.series.setdefault(key, []).append(reading(value))
                    self.series_quanta.setdefault(key, []).append(quantum(value))

    def _key(self, metric):
        keys = self.config.get("keys") or {}
        if metric in keys:
            return keys[metric], (keys[metric],)
        # The summary record when it has one of the metric's keys (as the class says), else the per-step series.
        for where in (self.summary, self.series):
            for key in DLLOGGER_KEYS.get(metric, ()):
                if key in where and (where is self.series or reading(where[key]) is not None):
                    return key, DLLOGGER_KEYS[metric]
        return None, DLLOGGER_KEYS.get(metric, ())

    def loss_keys(self):
        """The keys a loss is logged under: the one `keys` names, else every usual one."""
        keys = self.config.get("keys") or {}
        return (keys["loss_end"],) if "loss_end" in keys else DLLOGGER_KEYS["loss_end"]

    def keep_losses(self):
        """Every value of every loss key (loss_keys) the output holds: each key's steps, then the summary record's,
        a null one included (a NaN a strict encoder wrote). The per-step loss may be logged under one key and the
        summary's under another (`loss` per step, `train.loss` in the summary): each is a loss the run reached."""
        names = self.loss_keys()
        for key in names:
            for value in self.series.get(key, ()):
                self.loss(value, "dllogger: %s" % key)
        for key in names:
            raw = self.summary.get(key, False)
            if raw is None or reading(raw) is not None:
                self.loss(None if raw is None else reading(raw), "dllogger: %s" % key)

    def measured(self):
        skip = int(self.config.get("skip", 1))
        metrics = {}
        notes = {"keys": {}, "parameters": self.parameters}
        self.keep_losses()
        problem = None
        for metric in ("throughput", "accuracy", "loss_end", "window_s"):
            key, _ = self._key(metric)
            if key is None:
                continue
            value = reading(self.summary.get(key))
            q = quantum(self.summary.get(key))
            source = "summary"
            if value is None and key in self.series:
                values = self.series[key]
                if metric == "throughput":
                    kept = values[skip:]
                    if not kept:
                        problem = ("%d per-step %s value%s, all discarded as warm-up (skip: %d) and no summary "
                                   "record" % (len(values), key, "s" if len(values) != 1 else "", skip))
                        continue
                    value, source = mean(kept), "mean of %d steps after the first %d" % (len(kept), skip)
                    q = max(self.series_quanta[key][skip:])
                else:  # a loss logged as null is kept as None (keep_losses): not finite
                    value, source = math.nan if values[-1] is None else values[-1], "last step"
                    q = self.series_quanta[key][-1]
            if value is None:
                continue
            unit = self.units.get(key, "")
            percent = unit.strip() == "%" or self.config.get("accuracy_percent")
            if metric == "accuracy" and percent:
                value, q = value / 100.0, q / 100.0
            elif metric == "window_s":
                if unit.strip() not in DLLOG_TIME_UNITS:
                    problem = problem or ("%s is logged in %r, not a unit of time this parser knows (%s)"
                                          % (key, unit, ", ".join(u for u in DLLOG_TIME_UNITS if u)))
                    continue
                value, q = value * DLLOG_TIME_UNITS[unit.strip()], q * DLLOG_TIME_UNITS[unit.strip()]
            self.resolution[metric] = q
            if metric == "accuracy" and math.isfinite(value) and not 0 <= value <= 1 and problem is None:
                problem = ("%s %s is not a fraction between 0 and 1: DeepLearningExamples logs percent; say so with "
                           "accuracy_percent: true (or a %% unit in its METADATA record)" % (key, value))
            metrics[metric] = value
            notes["keys"][metric] = {"key": key, "from": source, "unit": unit}
            shown = {"throughput": unit.strip() or "items/s", "window_s": "s"}.get(metric, "")
            self.definitions[metric] = {"how": "dllogger: %s (%s)" % (key, "summary record" if source == "summary"
                                                                     else "mean of the steps after the first %d" % skip
                                                                     if metric == "throughput" else source),
                                        "unit": shown}
        return metrics, {}, notes, problem


@register
class PatternParser(Parser):
    """Named figures by regular expression, one line at a time. Each figure: `regex` (its number is the
    group named `value`, else group 1, else the match), `scale` (to the store's unit), `reduce` (last,
    first, mean, min, max) after `skip` matches, and the store metric it is, if any."""

    kind = "pattern"

    def __init__(self, config):
        Parser.__init__(self, config)
        self.figures = []
        for fig in config.get("figures", ()):
            self.figures.append((fig, re.compile(fig["regex"])))
        self.found = dict((fig["name"], []) for fig, _ in self.figures)
        self.quanta = dict((fig["name"], []) for fig, _ in self.figures)  # each match's printed resolution
        self.unreadable = {}
        self.ambiguous = {}

    def feed(self, line):
        Parser.feed(self, line)
        # A progress line redrawn in place holds its updates separated by \r, oldest first.
        for update in line.split("\r"):
            for fig, regex in self.figures:
                match = regex.search(update)
                if match is None:
                    continue
                groups = match.groupdict()
                text = groups.get("value") if "value" in groups else (match.group(1) if regex.groups else match.group(0))
                value, why = read_number(text or "", fig.get("decimal", "."), finite=False)
                if value is None:
                    self.unreadable.setdefault(fig["name"], why)
                    if "ambiguous" in why:
                        self.ambiguous.setdefault(fig["name"], why)
                    continue
                self.records += 1
                if fig.get("metric") == "loss_end":
                    self.loss(value * float(fig.get("scale", 1.0)), "pattern: figure %s" % fig["name"])
                self.found[fig["name"]].append(value)
                self.quanta[fig["name"]].append(text_quantum(text or "", fig.get("decimal", ".")))

    def where(self):
        source = self.config.get("file")
        return "%s (%d lines)" % ("the log file %s" % source if source else "the program's output", self.lines)

    def measured(self):
        metrics, figures, notes = {}, {}, {"matches": {}}
        problem = None
        for fig, _ in self.figures:
            name = fig["name"]
            skip = int(fig.get("skip", 0))
            values = self.found[name][skip:]
            notes["matches"][name] = len(self.found[name])
            how = fig.get("reduce", "last")
            value = None
            if name in self.ambiguous and problem is None:
                problem = "figure %s: the pattern matched %s" % (name, self.ambiguous[name])
            bad = [v for v in values if not math.isfinite(v)]
            quanta = self.quanta[name][skip:]
            q = 0.0
            if bad:  # min and max would pass a NaN over; a NaN the program printed is never skipped
                value = bad[-1]
            elif values:
                value = {"first": values[0], "last": values[-1], "min": min(values), "max": max(values),
                         "mean": mean(values)}.get(how, values[-1])
                q = {"first": quanta[0], "last": quanta[-1], "min": quanta[values.index(min(values))],
                     "max": quanta[values.index(max(values))]}.get(how, max(quanta))  # a mean: the coarsest
            if value is not None:
                printed, value = value, value * float(fig.get("scale", 1.0))
                q = q * abs(float(fig.get("scale", 1.0)))
                if not math.isfinite(value) and problem is None and fig.get("metric") != "loss_end":
                    problem = ("figure %s: the program printed %r, not a finite number (never skipped for an earlier "
                               "value)" % (name, printed) if not math.isfinite(printed) else
                               "figure %s: %s x %s is not a finite number" % (name, printed, fig.get("scale")))
            elif not fig.get("optional") and problem is None:
                if name in self.unreadable:
                    problem = "figure %s: the pattern matched %s" % (name, self.unreadable[name])
                else:
                    problem = "figure %s: no line of %s matches %s%s" % (
                        name, self.where(), fig["regex"],
                        " (%d matches, the first %d skipped)" % (len(self.found[name]), skip)
                        if self.found[name] else "")
            if value is not None and fig.get("metric") == "accuracy" and not 0 <= value <= 1 and problem is None:
                problem = ("figure %s: %s is not a fraction between 0 and 1; a percentage (DeepLearningExamples "
                           "logs them) needs unit: %%" % (name, values[-1]))
            definition = {"how": "pattern: figure %s /%s/, %s of the matches after %d" % (name, fig["regex"], how, skip),
                          "unit": fig.get("shown_unit") or SHOWN_UNITS.get(fig.get("metric"), fig.get("unit", ""))}
            if fig.get("metric"):
                if value is not None:
                    metrics[fig["metric"]] = value
                    self.resolution[fig["metric"]] = q
                    self.definitions[fig["metric"]] = definition
            else:
                figures[name] = {"value": value, "unit": fig.get("unit", ""), "better": fig.get("better")}
                self.definitions[name] = definition
        per_step = self.config.get("items_per_step")
        if per_step is not None and metrics.get("throughput") is None and metrics.get("iter_time"):
            metrics["throughput"] = float(per_step) / metrics["iter_time"]
            # a rate from a printed time per step: what the time's last digit moves the rate by
            self.resolution["throughput"] = float(per_step) * self.resolution.get("iter_time", 0.0) / (
                metrics["iter_time"] ** 2)
            self.definitions["throughput"] = {
                "how": "pattern: items_per_step (%s) / iter_time (%s)" % (
                    self.config.get("items_per_step_text") or per_step, self.definitions["iter_time"]["how"]),
                "unit": "%s/s" % (self.config.get("items") or "items")}
        return metrics, figures, notes, problem
