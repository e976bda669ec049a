"""A workload parser of a new kind, as a plug-in adds one (docs/internals.md, "How to add a workload parser"):
the launcher's side. Shipped in the benchmark as parser_keyvalue.py beside parsers.py, which imports it when
a matrix names the kind `keyvalue`. Standard library only, Python 3.6 syntax.

It reads lines `name=value` (the last value of a name wins); the names its settings list under `metrics` are
the store's metrics (throughput, loss_end, ...), each required. Every `loss_end=` line is a loss the training
reported, handed to `loss()` as printed (NaN included): a NaN among them makes the repeat diverged."""

from .parsers import Parser, register
from .readings import number, reading


@register
class KeyvalueParser(Parser):

    kind = "keyvalue"

    def __init__(self, config):
        Parser.__init__(self, config)
        self.values = {}

    def feed(self, line):
        Parser.feed(self, line)
        name, sep, value = line.strip().partition("=")
        if sep and name.strip() == "loss_end" and reading(value) is not None:
            self.loss(reading(value), "keyvalue: loss_end lines")
        if sep and number(value) is not None:
            self.records += 1
            self.values[name.strip()] = number(value)

    def measured(self):
        metrics = {}
        for name in self.config["metrics"]:
            if name in self.values:
                metrics[name] = self.values[name]
                self.definitions[name] = {"how": f"keyvalue: the last line {name}=VALUE",
                                          "unit": self.config["unit"] if name == "throughput" else ""}
        missing = [n for n in self.config["metrics"] if n not in metrics]
        problem = "found no {}=VALUE in {}".format(" or ".join(missing), self.where()) if missing else None
        return metrics, {}, {"names": sorted(self.values)}, problem
