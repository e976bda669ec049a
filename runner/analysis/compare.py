"""Two sides of a comparison: pair their cells, test each pair, and say what changed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from runner.analysis import sides, significance
from runner.analysis.comparable import align_steps, counted, definition_text, measure_notes
from runner.analysis.frame import CELL_KEYS, PARAM_KEYS, present
from runner.analysis.identity import Definitions, choose
from runner.analysis.pairing import MIN_EFFECT, change_words, pair_stats
from runner.analysis.sidefacts import (
    environment_info,
    precision_ratios,
    recipe_differences,
)
from runner.analysis.stats import THROTTLED, _join_unique, cell_attributes, metric_stats, throttled_counts
from runner.analysis.verdict import Verdict
from runner.base.errors import ConfigError
from runner.domain.outcomes import Status
from runner.record.metrics import Metric, get_metric


@dataclass(frozen=True)
class Side:
    """The rows one side of a comparison selects, and how the reference was understood.

    `frame` holds every definition the side selected; what is compared (`chosen`) is, per cell (its `keys`: the params;
    the environment too for a whole machine, or where the two sides pair on it, `pair_keys`), the newest definition, or
    with `pool` all of them (runner/analysis/identity.py). Build one with `select_side`."""

    ref: str
    kind: str       # env | tag | backend | run | host | machine
    value: str
    frame: pd.DataFrame
    pool: bool = False
    keys: tuple[str, ...] = PARAM_KEYS         # what names a cell on this side: CELL_KEYS for a whole machine
    machines: tuple[sides.Machine, ...] = ()   # where its repeats were measured (runner/analysis/sides.py)
    left_out: tuple[sides.Machine, ...] = ()   # other machines that measured what it names
    _cache: dict[object, pd.DataFrame] = field(default_factory=dict, compare=False, repr=False)
    _defs: list[Definitions] = field(default_factory=list, compare=False, repr=False)

    @property
    def label(self) -> str:
        return self.ref

    @property
    def definitions(self) -> Definitions:
        """Per pair key (the params), the definition compared and the ones left out (or pooled)."""
        if not self._defs:
            self._defs.append(choose(self.frame, self.keys, self.pool))
        return self._defs[0]

    @property
    def chosen(self) -> pd.DataFrame:
        return self.definitions.frame

    def stats(self, metric: str, keys: Sequence[str] | None = None) -> pd.DataFrame:
        """This side's cells keyed on `keys` (its own by default; computed once: a report compares the baseline many
        times)."""
        keys = tuple(keys or self.keys)
        if (metric, keys) not in self._cache:
            self._cache[(metric, keys)] = side_stats(self.chosen, metric, keys)
        return self._cache[(metric, keys)]

    def on(self, keys: Sequence[str]) -> Side:
        """This side with its cells named on `keys` where they add the environment (the two sides pair on it): each
        environment's newest definition of a cell, never another environment's in its place; else this side."""
        keys = tuple(keys)
        if keys == self.keys or "environment" not in keys:
            return self
        return replace(self, keys=keys, _cache={}, _defs=[])

    def precision_ratios(self, label: str) -> pd.DataFrame:
        """Each precision over fp32 in the same configuration; per environment (its `environment` column) where the
        side's cells are named by environment and it holds several: two environments' cells are never pooled."""
        key = "ratios"
        if key not in self._cache:
            envs = self.environments if "environment" in self.keys else []
            self._cache[key] = pd.concat(
                [precision_ratios(self.chosen[self.chosen["environment"] == e]).assign(environment=e) for e in envs],
                ignore_index=True) if len(envs) > 1 else precision_ratios(self.chosen)
        return self._cache[key].assign(side=label)

    def info(self, label: str) -> pd.DataFrame:
        key = "info"
        if key not in self._cache:
            self._cache[key] = environment_info(self.chosen)
        return self._cache[key].assign(side=label)

    def share_info(self, info: pd.DataFrame) -> None:
        """Take `info` as `environment_info(self.chosen)`: the caller computed it over rows that hold exactly these
        (an environment's facts are its own rows', in the order of their ids)."""
        self._cache["info"] = info

    @property
    def environments(self) -> list[str]:
        return list(dict.fromkeys(self.chosen["environment"]))


def select_side(df: pd.DataFrame, ref: str, pool: bool = False, here: str = "",
                provenance: Mapping[str, sides.Provenance] | None = None) -> Side:
    """The side `ref` stands for, as runner/analysis/sides.py `select` takes it (the one function every command asks:
    one machine's repeats unless the side names machines), ready for the decision core. `pool`: pool every definition
    the side holds for a cell, instead of comparing the newest."""
    sel = sides.select(df, ref, here, provenance)
    return Side(sel.ref, sel.kind, sel.value, sel.frame, pool, keys=sel.keys, machines=sel.machines,
                left_out=sel.left_out)


def geometric_mean(ratios: Iterable[float]) -> float:
    """exp(mean(log r)) over the positive, finite ratios; NaN when there are none."""
    vals = np.asarray([r for r in ratios if r is not None and np.isfinite(r) and r > 0], dtype=float)
    return float(np.exp(np.log(vals).mean())) if vals.size else math.nan


@dataclass(frozen=True)
class Comparison:
    """Everything `matrix compare` shows; templates and writers only format these frames."""

    a: Side
    b: Side
    metric: Metric
    alpha: float
    min_effect: float
    pairs: pd.DataFrame             # PARAM_KEYS + a_*/b_* stats, ratio, change, p_value, p_adjusted,
                                    # significant, verdict (words), decision (pass/fail/undecided)
    unpaired: pd.DataFrame          # side, PARAM_KEYS, environment(s), statuses
    precision_ratios: pd.DataFrame  # side, PARAM_KEYS - precision, precision, fp32_mean, mean, ratio
    environments: pd.DataFrame      # side, environment, backend, hardware and versions
    geomean: float
    geomean_low: float = math.nan   # its 95% interval, from the pairs' own (significance.geometric_interval)
    geomean_high: float = math.nan
    recipes: pd.DataFrame = field(default_factory=pd.DataFrame)  # precision, a, b: ran differently
    correction: str = significance.CORRECTION
    notes: list[str] = field(default_factory=list)  # how the sides were measured (emulated math, unsteady warm-ups)
    keys: tuple[str, ...] = PARAM_KEYS  # what the pairs are keyed on (the environment too: `pair_keys`)

    @property
    def machines(self) -> tuple[tuple[sides.Machine, ...], tuple[sides.Machine, ...]]:
        return self.a.machines, self.b.machines

    @property
    def across_machines(self) -> bool:
        """The sides ran on different machines (stores), or on different hardware."""
        ma, mb = self.machines
        ids = ({m.id for m in ma}, {m.id for m in mb})
        hw = ({h for m in ma for h in m.hardware}, {h for m in mb for h in m.hardware})
        return (bool(ids[0] and ids[1]) and ids[0] != ids[1]) or (bool(hw[0] and hw[1]) and hw[0] != hw[1])

    @property
    def geomean_words(self) -> str:
        return change_words(self.geomean, self.metric)

    @property
    def n_ratios(self) -> int:
        """Pairs with a ratio (both sides measured): what the geometric mean is over."""
        if self.pairs.empty:
            return 0
        r = self.pairs["ratio"].to_numpy(dtype=float)
        return int((np.isfinite(r) & (r > 0)).sum())

    @property
    def n_significant(self) -> int:
        return int(self.pairs["significant"].sum()) if not self.pairs.empty else 0

    def n_decision(self, decision: Verdict) -> int:
        return int((self.pairs["decision"] == decision.value).sum()) if not self.pairs.empty else 0

    @property
    def n_tested(self) -> int:
        """Pairs with a p-value: the family the false discovery rate is controlled over."""
        return int(self.pairs["p_value"].notna().sum()) if not self.pairs.empty else 0


def side_stats(df: pd.DataFrame, metric: str, keys: Sequence[str] = PARAM_KEYS) -> pd.DataFrame:
    """One side's cells keyed on `keys` (its params; for a whole machine, its environment too): statuses,
    environments, run settings and cell keys (more than one only when the side was pooled on purpose), and the
    metric's statistics."""
    count = counted(get_metric(metric)) or "steps"  # what the metric is compared at (steps, window iterations)
    read = [*keys, "environment", "cell_key", "status", count, f"how_{metric}", f"unit_{metric}", "settings", "id",
            "reason", "log_tail", "tags"]  # what the cell attributes read: the wide frame is not copied three times
    work = df[present(df, read)].rename(columns={"cell_key": "cell_keys"}).assign(
        environments=df["environment"])
    if "environment" not in keys:
        work = work.drop(columns=["environment"])
    ok = work["status"] == Status.OK.value
    steps = work[count] if count in work else pd.Series("", index=work.index)
    hows = work[f"how_{metric}"] if f"how_{metric}" in work else pd.Series("", index=work.index)
    units = work[f"unit_{metric}"] if f"unit_{metric}" in work else pd.Series("", index=work.index)
    oks = ok.tolist()  # lists, not Series: a text column's items one by one cost ten times more
    work = work.assign(steps_ok=[str(int(s)) if k and isinstance(s, int | float) and s == s else ""
                                 for s, k in zip(steps.tolist(), oks, strict=True)],
                       definition=[definition_text(h, u) if k and h else "" for h, u, k in
                                   zip(hows.tolist(), units.tolist(), oks, strict=True)])
    attrs, gid = cell_attributes(work, keys, ["environments", "settings", "cell_keys", "steps_ok", "definition"])
    st = metric_stats(df, gid, len(attrs), [metric])
    st.columns = [c[len(metric) + 1:] for c in st.columns]
    st[THROTTLED] = throttled_counts(df, gid, len(attrs))
    return pd.concat([attrs[[*keys, "statuses", "environments", "settings", "cell_keys", "steps_ok", "definition",
                             "_first"]],
                      st], axis=1)


def pair_cells(a: pd.DataFrame, b: pd.DataFrame, metric: Metric, alpha: float = significance.ALPHA,
               min_effect: float = MIN_EFFECT) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair A's and B's cells (long frames, one definition per params) on their params: (pairs, unpaired)."""
    return pair_stats(side_stats(a, metric.name), side_stats(b, metric.name), metric, alpha, min_effect)


def compare(a: Side, b: Side, metric: Metric | str = "throughput", alpha: float = significance.ALPHA,
            min_effect: float = MIN_EFFECT) -> Comparison:
    """Side A against side B: pairs with ratio B/A and a verdict, unpaired cells, FP16/FP32 per side."""
    m = get_metric(metric) if isinstance(metric, str) else metric
    shared = set(a.frame["id"]) & set(b.frame["id"])
    if shared:
        envs = _join_unique(a.frame[a.frame["id"].isin(shared)]["environment"])
        raise ConfigError(f"{a.ref!r} and {b.ref!r} select the same results (environment {envs}): "
                          "pick two disjoint sides, e.g. two environment names")
    keys, same = pair_keys(a, b), same_definition(a, b)
    a, b = a.on(keys), b.on(keys)  # paired on the environment: each side's cells are its environments' own
    sa, sb = a.stats(m.name, keys), b.stats(m.name, keys)
    notes = [*left_out_notes(a, "A"), *left_out_notes(b, "B"),
             *measure_notes([("A", a.ref, a.chosen), ("B", b.ref, b.chosen)])]
    if m.ladder:
        fa, fb, at = align_steps(a.chosen, b.chosen, m.name, keys)
        if at:
            sa, sb = side_stats(fa, m.name, keys), side_stats(fb, m.name, keys)
            steps = sorted(set(at.values()))
            notes.append(f"Where a pair's windows or warm-ups differ in length, its loss is compared at the last step "
                         f"every repeat of both sides recorded (step {', '.join(map(str, steps))}; {len(at)} "
                         f"pair{'s' if len(at) != 1 else ''}).")
    pairs, unpaired = pair_stats(sa, sb, m, alpha, min_effect, keys, same_definition=same)
    low, high = geomean_interval(pairs)
    pairs = pairs.drop(columns=["_se", "_dof"])  # what the geometric mean's interval is made of, read now
    return Comparison(
        a=a, b=b, metric=m, alpha=alpha, min_effect=min_effect, pairs=pairs, unpaired=unpaired,
        precision_ratios=pd.concat([a.precision_ratios("A"), b.precision_ratios("B")], ignore_index=True),
        environments=pd.concat([a.info("A"), b.info("B")], ignore_index=True),
        geomean=geometric_mean(pairs["ratio"]) if not pairs.empty else math.nan, geomean_low=low, geomean_high=high,
        recipes=recipe_differences(a.chosen, b.chosen), notes=notes, keys=keys,
    )


def geomean_interval(pairs: pd.DataFrame) -> tuple[float, float]:
    """The 95% interval of the geometric mean of B/A over the pairs with a ratio, where every one of them has an
    interval (NaN otherwise: one pair without a spread leaves the whole unknown)."""
    if pairs.empty:
        return math.nan, math.nan
    r = pairs["ratio"].to_numpy(dtype=float)
    sized = np.isfinite(r) & (r > 0)
    se, dof = pairs["_se"].to_numpy(dtype=float)[sized], pairs["_dof"].to_numpy(dtype=float)[sized]
    if not sized.any() or not np.isfinite(se).all():
        return math.nan, math.nan
    return significance.geometric_interval(np.log(r[sized]), se, dof)


def pair_keys(a: Side, b: Side) -> tuple[str, ...]:
    """What two sides' cells pair on (docs/decisions.md, "Which cells pair"):

    - the environment and the params between two whole machines (never one's `metal` with the other's `container`);
    - the environment and the params where both sides hold an environment and one of them holds more than one (a
      run, a tag, a backend or a machine of several environments): one environment's cell is never paired with
      another's; the cells of an environment only one side holds are unpaired;
    - else the params: two sides of one environment each (`compare envA envB`) pair across the two environments, and
      a side of several environments against sides that share none of them compares its newest cell per params.

    A whole machine that holds several environments of one cell, against a side it shares no environment with,
    cannot be paired on the params alone, and is refused with how to name one."""
    if a.keys == b.keys == CELL_KEYS or by_environment(a, b):
        return CELL_KEYS
    if a.keys == b.keys:
        return a.keys
    for s in (a, b):
        if s.keys != PARAM_KEYS and not s.chosen.empty:
            envs = s.chosen.groupby(list(PARAM_KEYS), sort=False, dropna=False)["environment"].nunique()
            if (envs > 1).any():
                names = ", ".join(dict.fromkeys(s.chosen["environment"]))
                raise ConfigError(f"{s.ref!r} holds several environments of the same cells ({names}): compare it with "
                                  f"another machine, or name one environment, e.g. "
                                  f"{s.chosen['environment'].iloc[0]}@{s.ref}")
    return PARAM_KEYS


def by_environment(a: Side, b: Side) -> bool:
    """The two sides hold an environment in common and one of them holds more than one: they pair on the environment
    as well as the params (`pair_keys`)."""
    held = [set(s.frame["environment"]) for s in (a, b)]
    return bool(held[0] & held[1]) and max(len(h) for h in held) > 1


def same_definition(a: Side, b: Side) -> bool:
    """Between two whole machines a pair is compared only where both measured the same definition of the cell (less
    the store an imported key names); sides paired on the environment otherwise (two runs of it) compare its
    definitions, as one environment's two runs always have."""
    return a.kind in sides.MACHINE_KINDS and b.kind in sides.MACHINE_KINDS


def left_out_notes(side: Side, label: str) -> list[str]:
    """What a side left out: other machines' repeats of what it names (a side takes one machine's)."""
    out = []
    for m in side.left_out:
        out.append(f"{label} ({side.ref}) takes this store's repeats: {m.repeats} repeat{'s' if m.repeats != 1 else ''} "
                   f"measured on {m.words()} left out (name them: {side.ref}@{m.ref}).")
    return out
