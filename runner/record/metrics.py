"""The metric table: every fact of a measured quantity, written once. Its name and aliases, label, units (the
built-in benchmark's for an image model and for a transformer; a workload's own come with its results), direction
and its words, stored unit and display scale, how it is read from a result, what a machine can reach (admission),
which views show it and where, and the gate's rule words. Every table, plot, page and JSON takes its labels and its
list of metrics from here: a new metric is one entry here and its producer (the benchmark or a workload parser)."""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from runner.base.errors import ConfigError
from runner.record import readers
from runner.record.readers import Reader

# The views that show a chosen list of metrics, each in its own order (a Metric's place in it; 0: not shown there).
VIEWS = ("grid", "precision", "precision_table", "machines", "plot", "site")


@dataclass(frozen=True)
class Reach:
    """What a machine can reach for one figure, in stored units (runner/record/admission.py, docs/admission.md).
    `refuses`: a figure outside refuses the repeat (it is what a repeat is ranked on); else only the figure is left
    out. `low_open`: the low end itself is outside (a throughput of 0 is no measurement)."""

    low: float
    high: float
    refuses: bool
    why: str
    low_open: bool = True


@dataclass(frozen=True)
class Metric:
    """A measured quantity: its frame column, how to name it, which direction is better, and where it shows."""

    name: str
    label: str
    unit: str                   # the built-in benchmark's unit for an image model (img/s)
    higher_is_better: bool
    scale: float = 1.0          # stored value x scale = displayed value (bytes -> MiB, s -> ms)
    better: str = "faster"
    worse: str = "slower"
    stored_unit: str = ""
    reader: Reader | None = None         # how to read it from a result; None: the figure metrics.<name>
    token_unit: str = ""                 # the built-in benchmark's unit for a transformer (tok/s); "": `unit`
    how: str = ""                        # how the built-in benchmark obtains it; "": "bench: <label>"
    aliases: tuple[str, ...] = ()        # other names a user may write (--metric, references, --fail-on)
    reach: Reach | None = None           # admission's bound; None: any finite value
    raw_fields: tuple[str, ...] = ()     # the result's metrics a figure admission leaves out is read from
    rule: str = ""                       # the gate's word for a change for the worse (--fail-on slower:3%)
    rule_better: str = ""                # ... and for the better (faster:10%)
    per_step: bool = False               # depends on the training steps before it: compared at equal steps only
    per_window: bool = False             # the measured window's length: compared at equal window iterations only
    ladder: bool = False                 # can be read at any recorded step (bench's metrics.loss_at)
    throttle_sensitive: bool = False     # a throttled GPU changes it: a table says how many repeats throttled
    vs_fp32: bool = False                # the precision summary shows its ratio to fp32
    grid: int = 0                        # its place in the precision grid (0: not shown there)
    precision: int = 0                   # ... in the precision summary's data (report.json)
    precision_table: int = 0             # ... in the precision summary's table
    machines: int = 0                    # ... in the machines side by side
    plot: int = 0                        # ... among the plots against batch size
    site: int = 0                        # ... among the histories `matrix publish --metric` plots
    figure_unit: str | None = None       # the unit a workload's figure of it is stored in (pattern parser,
                                         # runner/backends/workloads/figures.py); None: no workload figure is it

    @property
    def heading(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label

    def read(self, metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
        """The figure from a result's documents, in stored units (NaN: not measured)."""
        return self.reader(metrics, raw) if self.reader is not None else readers.number(metrics.get(self.name))

    def unit_for(self, tokens: bool) -> str:
        """The built-in benchmark's unit of it: a transformer's (tokens) or an image model's."""
        return self.token_unit if tokens and self.token_unit else self.unit

    def how_for(self, tokens: bool) -> str:
        """How the built-in benchmark obtains it, for a transformer's or an image model's result."""
        if tokens and self.token_unit:
            return TOKEN_HOW
        return self.how or f"bench: {self.label}"

    def place(self, view: str) -> int:
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; views: {', '.join(VIEWS)}")
        return int(getattr(self, view))


TOKEN_HOW = "bench: tokens (sequences x seq_len) over the synchronised measured window"
_MOST = 1e13  # items per second of one phase
MIB = 1 / 2**20

# The ceilings are far above any machine of 2026 (a ResNet-50 trains at ~7,000 img/s per H100, a GPT-2 124M at
# ~500,000 tok/s; the largest clusters have ~100,000 GPUs), and far below what turns a mean or a ratio into an
# overflow (1.7e308). docs/admission.md lists them.
BUILT_IN: tuple[Metric, ...] = (
    Metric("throughput", "throughput", "img/s", True, stored_unit="img/s", token_unit="tok/s",
           how="bench: items over the synchronised measured window",
           reach=Reach(0.0, 1e12, True, "items per second: above 0, at most 1e12 (a trillion)"),
           rule="slower", rule_better="faster", throttle_sensitive=True, vs_fp32=True,
           grid=1, precision=2, precision_table=2, machines=1, plot=1, site=1, figure_unit="per second"),
    # With bench's --breakdown (axis `breakdown: [true]`): images over rank 0's time in each phase.
    Metric("fwd_throughput", "forward", "img/s", True, stored_unit="img/s", token_unit="tok/s",
           reader=readers.phase_throughput("forward"), aliases=("forward",), raw_fields=("breakdown",),
           reach=Reach(0.0, _MOST, False, "items per second of the forward passes: above 0, at most 1e13")),
    Metric("bwd_throughput", "backward", "img/s", True, stored_unit="img/s", token_unit="tok/s",
           reader=readers.phase_throughput("backward"), aliases=("backward",), raw_fields=("breakdown",),
           reach=Reach(0.0, _MOST, False, "items per second of the backward passes: above 0, at most 1e13")),
    Metric("iter_time", "time/iter", "ms", False, 1e3, stored_unit="s", reader=readers.iter_time, aliases=("iter",),
           reach=Reach(1e-6, 86400.0, True, "seconds a training step: at least 1 microsecond (no framework launches a "
                       "step's kernels faster), at most a day", low_open=False),
           throttle_sensitive=True, vs_fp32=True, grid=2, precision=1, precision_table=1, machines=2, plot=2,
           figure_unit="s"),
    # 0 is a window a log's whole milliseconds could not resolve (a workload's run_stop in the same millisecond as its
    # run_start): the workload parsers take it, so admission does (its rate, if any, is judged on its own).
    # A window's length measures speed only against a window of as many iterations: a calibrated one (iterations:
    # auto) is as long as its target whatever the speed.
    Metric("window_s", "time", "s", False, stored_unit="s", aliases=("time",), per_window=True,
           reach=Reach(0.0, 30 * 86400.0, True, "seconds: 0 to 30 days", low_open=False),
           throttle_sensitive=True, site=2, figure_unit="s"),
    Metric("peak_mem", "peak memory", "MiB", False, MIB, "less memory", "more memory", "bytes",
           reader=readers.peak_memory, aliases=("memory", "mem"), raw_fields=("peak_mem_allocated", "peak_mem_reserved"),
           reach=Reach(0.0, 2.0**50, False, "bytes: 0 to 1 PiB", low_open=False), rule="memory", vs_fp32=True,
           grid=3, precision=3, precision_table=3, machines=3, plot=3, figure_unit="bytes"),
    Metric("loss_end", "final loss", "", False, 1.0, "lower", "higher", aliases=("loss",), per_step=True, ladder=True,
           grid=6, precision=6, machines=5, site=3, figure_unit=""),
    Metric("accuracy", "accuracy", "", True, 1.0, "higher", "lower", aliases=("acc",), raw_fields=("accuracy",),
           reach=Reach(0.0, 1.0, False, "a fraction from 0 to 1", low_open=False), per_step=True,
           grid=5, precision=5, precision_table=5, machines=4, site=4, figure_unit="fraction"),
    Metric("data_wait", "data wait", "%", False, 100.0, "less waiting", "more waiting", "fraction",
           reader=readers.data_wait_share, raw_fields=("data_wait_s",),
           reach=Reach(0.0, 1.0 + 1e-9, False, "a fraction of the window from 0 to 1", low_open=False)),
    # GPU energy over the measured window (bench's telemetry: NVML's energy counter or sampled power).
    Metric("images_per_joule", "energy efficiency", "img/J", True, 1.0, "more efficient", "less efficient", "img/J",
           token_unit="tok/J", aliases=("energy", "efficiency"), raw_fields=("images_per_joule",),
           reach=Reach(0.0, 1e9, False, "items per joule: above 0, at most 1e9"), rule="energy",
           throttle_sensitive=True, vs_fp32=True, grid=4, precision=4, precision_table=4, machines=7, site=5,
           figure_unit="per joule"),
    # A transformer's model FLOPs utilisation (bench's flops.py: the formula and the peak's source per repeat).
    Metric("mfu", "MFU", "%", True, 100.0, "higher", "lower", "fraction", raw_fields=("mfu",),
           reach=Reach(0.0, 1.0, False, "a fraction of the peak: above 0, at most 1 (above it, the peak is wrong)"),
           machines=6),
)

# The headline metric: what a repeat is ranked on, what a command compares, bisects and plots unless told otherwise,
# and what `matrix show` and a run's progress print. Everything else names it through HEADLINE.
HEADLINE = "throughput"
# Not a metric of the table: what `matrix bisect --metric status` compares, only how each environment's repeats ended.
STATUS_METRIC = "status"


class MetricTable(Mapping[str, Metric]):
    """The metrics by name, in the table's order; `version` changes whenever one is added or removed, so that what is
    derived from the table (columns, bounds, definitions) is derived again."""

    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._by: dict[str, Metric] = {}
        self.version = 0
        for m in metrics:
            self.add(m)

    def __getitem__(self, name: str) -> Metric:
        return self._by[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by)

    def __len__(self) -> int:
        return len(self._by)

    def __contains__(self, name: object) -> bool:
        return name in self._by

    def keys(self) -> KeysView[str]:
        return self._by.keys()

    def values(self) -> ValuesView[Metric]:
        return self._by.values()

    def items(self) -> ItemsView[str, Metric]:
        return self._by.items()

    def add(self, metric: Metric) -> None:
        """Register a metric; a name or an alias taken already is an error, never a silent overwrite."""
        taken = {*self._by, *(a for m in self._by.values() for a in m.aliases)}
        clash = [n for n in (metric.name, *metric.aliases) if n in taken]
        if clash:
            raise ValueError(f"metric {metric.name}: {', '.join(clash)} is a metric's name or alias already")
        if not metric.name.isidentifier():
            raise ValueError(f"metric {metric.name!r}: a metric's name is a column name (letters, digits, _)")
        self._by[metric.name] = metric
        self.version += 1

    def remove(self, name: str) -> None:
        del self._by[name]
        self.version += 1

    @contextmanager
    def adding(self, metric: Metric) -> Iterator[Metric]:
        """A metric in the table for the length of a block (a test's, a plugin's)."""
        self.add(metric)
        try:
            yield metric
        finally:
            self.remove(metric.name)

    def shown(self, view: str) -> tuple[Metric, ...]:
        """The metrics a view shows, in its order."""
        return tuple(sorted((m for m in self._by.values() if m.place(view)), key=lambda m: m.place(view)))

    def names(self) -> str:
        """Every metric a user may name, in words for a help text: 'throughput, iter_time (iter), ...'."""
        return ", ".join(f"{m.name} ({', '.join(m.aliases)})" if m.aliases else m.name for m in self._by.values())

    def rules(self) -> dict[str, tuple[Metric, bool]]:
        """The gate's rule words: word -> (its metric, whether it fears a change for the worse)."""
        out: dict[str, tuple[Metric, bool]] = {}
        for m in self._by.values():
            out.update({m.rule: (m, True)} if m.rule else {})
            out.update({m.rule_better: (m, False)} if m.rule_better else {})
        return out


METRICS = MetricTable(BUILT_IN)


class _Aliases(Mapping[str, str]):
    """Every metric's aliases: alias -> name, read from the table as it is now."""

    def __init__(self) -> None:
        self._made: tuple[int, dict[str, str]] = (-1, {})

    def _all(self) -> dict[str, str]:
        if self._made[0] != METRICS.version:
            self._made = (METRICS.version, {a: m.name for m in METRICS.values() for a in m.aliases})
        return self._made[1]

    def __getitem__(self, alias: str) -> str:
        return self._all()[alias]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


METRIC_ALIASES: Mapping[str, str] = _Aliases()


def get_metric(name: str | Metric) -> Metric:
    """The metric called `name` (or one of its aliases); a ConfigError lists the known ones."""
    if isinstance(name, Metric):
        return name
    key = METRIC_ALIASES.get(name, name)
    if key not in METRICS:
        known = ", ".join([*METRICS, *METRIC_ALIASES])
        raise ConfigError(f"unknown metric {name!r}; known metrics: {known}")
    return METRICS[key]


def figures(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> dict[str, float]:
    """A stored result's figures in stored units, one per metric (NaN: not measured): the frame's columns, and what
    admission's bounds judge. Read for every repeat a site plots: the table's readers are looked up once."""
    if _READERS[0] != METRICS.version:
        _READERS[:] = [METRICS.version, tuple((name, m.reader) for name, m in METRICS.items())]
    number = readers.number
    return {name: number(metrics.get(name)) if reader is None else reader(metrics, raw)
            for name, reader in _READERS[1]}


_READERS: list[Any] = [-1, ()]  # (the table's version, ((name, reader or None), ...))


def definition_fields() -> tuple[str, ...]:
    """The frame's `how_<m>` and `unit_<m>` columns, in the table's order."""
    return tuple(f"{part}_{m}" for m in METRICS for part in ("how", "unit"))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict | Mapping) else {}


def definitions(metrics: Mapping[str, Any], model: Any = None) -> dict[str, str]:
    """The `how_<m>` and `unit_<m>` columns of one repeat: its result's metrics.definitions (keyed on a metric's
    name or alias), else the built-in benchmark's definition for its `model` ("bench: <label>", the Metric's unit;
    a transformer's throughput in tok/s)."""
    from runner.domain.bench_contract import TRANSFORMER_MODELS

    given = _mapping(metrics.get("definitions"))
    tokens = model in TRANSFORMER_MODELS
    made = _BUILT_IN.get(tokens)
    if not given and made is not None and made[0] == METRICS.version:  # most repeats: the benchmark's own
        return dict(made[1])
    aliases = METRIC_ALIASES
    out: dict[str, str] = {}
    for name, m in METRICS.items():
        entry = _mapping(given.get(name))
        if not entry:
            entry = next((_mapping(v) for k, v in given.items() if aliases.get(str(k)) == name), {})
        how, unit = entry.get("how"), entry.get("unit")
        out[f"how_{name}"] = str(how).strip() if isinstance(how, str) and how.strip() else m.how_for(tokens)
        out[f"unit_{name}"] = str(unit).strip() if isinstance(unit, str) and unit.strip() else m.unit_for(tokens)
    if not given:
        _BUILT_IN[tokens] = (METRICS.version, dict(out))
    return out


# definitions() of a repeat that states none, image model or transformer, with the table's version it was made for.
_BUILT_IN: dict[bool, tuple[int, dict[str, str]]] = {}


def definition(metrics: Mapping[str, Any], name: str, model: Any = None) -> tuple[str, str]:
    """(how, unit) of one metric of a result: its metrics.definitions entry, else the benchmark's default for its
    `model` (a transformer's throughput is in tok/s)."""
    got = definitions(metrics if isinstance(metrics, dict | Mapping) else {}, model)
    return got[f"how_{name}"], got[f"unit_{name}"]


def definition_text(how: Any, unit: Any) -> str:
    """One repeat's definition of a metric in words: 'mllog: mean of tracked_stats [samples/s]'."""
    how_s, unit_s = str(how or "").replace(", ", "; "), str(unit or "").replace(", ", "; ")
    return f"{how_s} [{unit_s}]" if unit_s else how_s


def shown_unit(units: Iterable[Any], name: str) -> str:
    """The unit to label a column of metric `name` with, from its rows' units (`unit_<m>` values, or ', '-joined
    ones of a summary): the one they share, else each of them ('img/s | tok/s'); the Metric's own when none."""
    seen = dict.fromkeys(u.strip() for v in units if isinstance(v, str) for u in v.split(", ") if u.strip())
    return " | ".join(seen) if seen else METRICS[name].unit


def metric_heading(name: str, units: Iterable[Any] = ()) -> str:
    """'throughput (tok/s)': a metric's label with the unit its rows were measured in."""
    unit = shown_unit(units, name)
    return f"{METRICS[name].label} ({unit})" if unit else METRICS[name].label
