"""What a cell is: its key and its machine, never its name.

A cell's key (runner/domain/cells.py `Cell.key`) hashes the environment's definition (name, backend, python, `env`,
image, `setup`, ...), the params and the run's iterations, warmup and seed: the store and resume key on it,
`matrix check` judges by it. The name a table shows a cell under (its environment and params, or only its
params across the two sides of a comparison) can cover several definitions: the same environment name
with another `env` or image, the same matrix run with other iterations. Their repeats are never pooled by
accident: each name shows its newest definition (the one with the newest stored row), and the others are
listed with their repeats so that a report can say so. Pooling is a choice (`pool=True`, `compare --pool`).

The machine is part of a cell's identity too: the store that measured a repeat (`origin`: an imported repeat's origin
store, "" for this store's own) and its device. A cell key imported from another store carries that store's id
(`<key>@<store id>`), so two machines' repeats are two definitions here; and one store's repeats of a key measured
on two devices (a store moved to another GPU, a cluster's nodes of two kinds) are two definitions as well, told apart
by the device. Which machine's repeats a side takes is runner/analysis/sides.py's `select`.

What the benchmark ran is part of it as well: its recipe (math, loss scale, TF32, flags, the optimizer its `auto`
chose; runner/analysis/recipes.py), which the key does not hash. A newer benchmark that runs one key another way
(an `auto` that chooses foreach SGD where it chose fused) stores repeats of other work under the same key: where one
key ran more than one recipe, each is a definition, the newest shown and the others listed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from runner.analysis.frame import present
from runner.analysis.stats import status_summary

DEFINITION_COLUMNS = ["cell_key", "environment", "settings", "n", "statuses", "runs", "first_at", "last_at",
                      "differs", "shown"]
# What a definition's stored repeats can tell about it, besides its key: the run settings and what the
# environment turned out to be. A change to `env`, `setup` or an image tag that moved nowhere else is
# only in the key.
_TELLING = ("origin", "settings", "recipe", *(f"env_{f}" for f in ("image", "image_id", "repo_digest", "torch", "cuda", "cudnn",
                                                           "python", "driver", "device_name")), "hardware",
            "env_hostname")
_TELLING_WORDS = {"origin": "machine (store)", "hardware": "hardware", "settings": "run settings",
                  "recipe": "what the benchmark ran (recipe)", "env_image": "image", "env_image_id": "image id",
                  "env_repo_digest": "image digest", "env_torch": "torch", "env_cuda": "CUDA", "env_cudnn": "cuDNN",
                  "env_python": "Python", "env_driver": "driver", "env_device_name": "device",
                  "env_hostname": "host"}
UNSEEN = ("the environment's definition (env, image, setup or python), which only the cell key records")


def origins(df: pd.DataFrame) -> pd.Series:
    """Per row, the store that measured it ("" for this store's own): the frame's `origin`, else its run id's."""
    if "origin" in df:
        return df["origin"].fillna("").astype(str)
    return df["run_id"].map(lambda r: str(r).rpartition("@")[2] if "@" in str(r) else "")


def devices(df: pd.DataFrame) -> pd.Series:
    """Per row, the device it ran on (the frame's `hardware`); a repeat that stopped before the device was recorded
    takes its run's device for the same cell, else its cell's."""
    return _filled(df, "hardware")


def recipes(df: pd.DataFrame) -> pd.Series:
    """Per row, what the benchmark ran (the frame's `recipe`: math, loss scale, TF32, flags, the optimizer its `auto`
    chose); a repeat that stopped before recording it takes its run's for the same cell, else its cell's."""
    return _filled(df, "recipe")


def _filled(df: pd.DataFrame, column: str) -> pd.Series:
    if df.empty or column not in df:
        return pd.Series("", index=df.index, dtype=object)
    values = df[column].fillna("").astype(str)
    if not (values == "").any():
        return values
    known = values.where(values != "")
    by_run = known.groupby([df["cell_key"], df["run_id"]], sort=False).transform("first")
    by_key = known.groupby(df["cell_key"], sort=False).transform("first")
    return known.fillna(by_run).fillna(by_key).fillna("")


def definition_ids(df: pd.DataFrame) -> pd.Series:
    """Per row, its definition on its machine: the cell key (an imported one names its store); the device where one
    key was measured on more than one; and what the benchmark ran where one key ran more than one recipe (a newer
    benchmark whose `auto` chooses another optimizer, another loss scale: not the same work under the same key)."""
    key = df["cell_key"].astype(str)
    out = key
    for part, word in ((devices(df), " on "), (recipes(df), " ran ")):
        spans = part.groupby(key, sort=False).transform("nunique") > 1
        if spans.any():
            out = out.where(~spans, out + word + part)
    return out


@dataclass(frozen=True)
class Definitions:
    """The rows a view shows, and the names that were measured under more than one definition."""

    frame: pd.DataFrame                 # the rows shown: each name's newest definition (all when pooled)
    several: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DEFINITION_COLUMNS))
    keys: tuple[str, ...] = ()          # the columns that make a name
    pooled: bool = False

    @property
    def n_names(self) -> int:
        """How many names have more than one definition."""
        if self.several.empty:
            return 0
        return int(self.several.groupby(list(self.keys), sort=False, dropna=False).ngroups)


def choose(df: pd.DataFrame, keys: Sequence[str], pool: bool = False) -> Definitions:
    """Per name (the `keys` columns), the rows of its newest definition; with `pool`, every definition's.
    `several` lists, per name with more than one definition, each definition: key, environment, run
    settings, repeats by status, runs, first and last time measured, what tells them apart, and whether
    the rows shown include it."""
    keys = tuple(keys)
    if df.empty or "cell_key" not in df:
        return Definitions(df, keys=keys, pooled=pool)
    ids = definition_ids(df)
    narrow = df[present(df, [_order(df), *keys])].assign(_def=ids)  # the columns read, not the whole frame
    defs = narrow.groupby("_def", sort=False).agg(_last=(_order(df), "max"))
    names = narrow.drop_duplicates("_def").set_index("_def")[list(keys)]
    defs = defs.join(names)
    count = defs.groupby(list(keys), sort=False, dropna=False)["_last"].transform("size")
    if not (count > 1).any():
        return Definitions(df, keys=keys, pooled=pool)
    newest = defs.groupby(list(keys), sort=False, dropna=False)["_last"].transform("max") == defs["_last"]
    shown_keys = set(defs.index) if pool else set(defs.index[newest])
    frame = df if pool else df[ids.isin(shown_keys)]
    several = _table(df[ids.isin(set(defs.index[count > 1]))], ids, keys, shown_keys)
    return Definitions(frame, several, keys, pool)


def _order(df: pd.DataFrame) -> str:
    """The column that orders rows as the store that measured them did (the frame's `seq`; `id` in a frame without)."""
    return "seq" if "seq" in df else "id"


def _table(df: pd.DataFrame, ids: pd.Series, keys: tuple[str, ...], shown: set[str]) -> pd.DataFrame:
    rows = []
    for def_id, g in df.groupby(ids.loc[df.index], sort=False):
        cell_key = str(g["cell_key"].iloc[0])
        settings = next((s for s in g["settings"] if s), "") if "settings" in g else ""
        rows.append({**{k: g[k].iloc[0] for k in keys}, "cell_key": cell_key,
                     "environment": ", ".join(dict.fromkeys(map(str, g["environment"]))), "settings": settings,
                     "n": len(g), "statuses": status_summary(g["status"].value_counts().to_dict()),
                     "runs": ", ".join(dict.fromkeys(map(str, g.sort_values(_order(g))["run_id"]))),
                     "first_at": float(g["started_at"].min()), "last_at": float(g["started_at"].max()),
                     "_last": int(g[_order(g)].max()), "shown": def_id in shown,
                     **{c: ", ".join(sorted({str(v) for v in g[c] if str(v)})) for c in _TELLING if c in g}})
    out = pd.DataFrame(rows)
    differs = {}
    for name, g in out.groupby(list(keys), sort=False, dropna=False):
        told = [_TELLING_WORDS[c] for c in _TELLING if c in g and g[c].nunique() > 1]
        if len(set(g["environment"])) > 1:
            told.insert(0, "environment")
        differs[name if isinstance(name, tuple) else (name,)] = ", ".join(told) or UNSEEN
    out["differs"] = [differs[tuple(r[k] for k in keys)] for r in out.to_dict("records")]
    # Each name's definitions together, oldest first, in the order the names were first measured.
    out["_name_first"] = out.groupby(list(keys), sort=False, dropna=False)["_last"].transform("min")
    out = out.sort_values(["_name_first", "_last"], kind="stable")
    return out[[*keys, *(c for c in DEFINITION_COLUMNS if c not in keys)]].reset_index(drop=True)


def what_changed(before: pd.DataFrame, after: pd.DataFrame) -> str:
    """What tells two definitions of one name apart, in words with the values on each side ('run settings
    iterations=20 -> iterations=50; torch 2.12.0 -> 2.13.0'), or UNSEEN when only the cell keys differ."""
    said = []
    for c in _TELLING:
        if c not in before or c not in after:
            continue
        a, b = (", ".join(sorted({str(v) for v in g[c] if str(v)})) for g in (before, after))
        if a != b:
            said.append((c, f"{_TELLING_WORDS[c]} {a or '?'} -> {b or '?'}"))
    # A host name changes with every container a run starts: said only when nothing else tells them apart.
    told = [w for c, w in said if c != "env_hostname"] or [w for _, w in said]
    return "; ".join(told) or UNSEEN
