"""The `matrix` workload parser: the result line a script prints through matrix_bench.measure (the script measured
its own window). Imported by the launcher (workload.py) and by parsers.make when the kind is asked for, as any
parser_KIND.py module."""

import json

from .contract import RESULT_PREFIX
from .parsers import Parser, register


@register
class MatrixParser(Parser):
    """The result line of matrix_bench.measure: the script measured its own window."""

    kind = "matrix"

    def __init__(self, config):
        Parser.__init__(self, config)
        self.result = None

    def feed(self, line):
        Parser.feed(self, line)
        if not line.startswith(RESULT_PREFIX):
            return
        try:
            record = json.loads(line[len(RESULT_PREFIX):])
        except ValueError:
            return
        if isinstance(record, dict):
            self.records += 1
            self.result = record

    def measured(self):
        if self.result is None:
            return {}, {}, {}, ("found no MATRIX_RESULT line in the program's output (%d lines): does the script "
                                "call matrix_bench.measure's report()?" % self.lines)
        metrics = dict(self.result.get("metrics") or {})
        metrics.pop("loss_seen", None)  # the script's own record of its losses: seen_losses
        own = metrics.pop("definitions", None)
        if isinstance(own, dict):
            self.definitions.update(own)
        elif metrics.get("throughput") is not None:
            self.definitions["throughput"] = {"how": "measure: items over the script's synchronised window",
                                              "unit": "items/s"}
        return metrics, {}, {}, None

    def seen_losses(self, metrics):
        """The losses the script reported through measure.report (its record), else its final loss."""
        own = (self.result or {}).get("metrics") or {}
        if isinstance(own, dict) and isinstance(own.get("loss_seen"), dict):
            return own["loss_seen"]
        return Parser.seen_losses(self, metrics)
