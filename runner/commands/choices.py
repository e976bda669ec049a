"""The values an option takes, each read from the table that defines it (the metric table, the report formats, the
backends, the bench's precisions and models): what the shell completes (runner/cli/complete.py), never a copy. Each
table is imported when it is first asked for, so that the command line itself stays light."""

from __future__ import annotations


def metrics() -> list[str]:
    """--metric: every metric of the table by name, then the aliases the same option takes."""
    from runner.record.metrics import METRIC_ALIASES, METRICS
    return [*METRICS, *METRIC_ALIASES]


def gate_rules() -> list[str]:
    """--fail-on RULE:X%: the gate's rule words of the metric table."""
    from runner.record.metrics import METRICS
    return list(METRICS.rules())


def report_formats() -> list[str]:
    from runner.report.formats import FORMATS
    return FORMATS.names()


def compare_formats() -> list[str]:
    from runner.report import COMPARE_FORMATS
    return list(COMPARE_FORMATS)


def diff_formats() -> list[str]:
    """diff's and bisect's --format."""
    from runner.report.diff import DIFF_FORMATS
    return list(DIFF_FORMATS)


def check_formats() -> list[str]:
    from runner.commands.check import FORMATS
    return list(FORMATS)


def undecided_policies() -> list[str]:
    from runner.analysis.verdict import UNDECIDED_POLICIES
    return list(UNDECIDED_POLICIES)


def backends() -> list[str]:
    from runner import backends as registry
    return registry.kinds()


def axes() -> list[str]:
    """The axes a matrix file (and --only) may name."""
    from runner.domain.cells import Axes
    return list(Axes.model_fields)


def axis_values(axis: str) -> list[str]:
    """The values the bench defines for an axis (precision, model, device, ...); none for a free one (batch_size)."""
    from runner.domain import bench_contract as bench
    values = {"precision": bench.PRECISIONS, "model": bench.MODELS, "device": bench.DEVICES,
              "optimizer": bench.OPTIMIZERS, "optimizer_impl": bench.OPTIMIZER_IMPLS, "amp_impl": bench.AMP_IMPLS,
              "loss_impl": bench.LOSS_IMPLS, "compile_mode": bench.COMPILE_MODES, "attention": bench.ATTENTION_BACKENDS,
              "fp8_impl": bench.FP8_IMPLS, "fp8_recipe": bench.FP8_RECIPES}
    return list(values.get(axis, ()))
