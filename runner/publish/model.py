"""The site's content as plain records: machines, environments, runs, cells with their histories and changes,
and the cross-machine comparisons (the compare core's pairs and verdicts). Every number is made here; the
templates only write it."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import runner.analysis as an
from runner.analysis.identity import definition_ids
from runner.publish import cell_pages, index
from runner.publish import tables as tables_
from runner.publish.cell_pages import NAME_KEYS, when
from runner.publish.load import Loaded
from runner.report import fmt, tone
from runner.report import pairs as pair_views
from runner.report.bisect_answer import change_percent
from runner.report.head import run_status
from runner.store.exchange import strip


@dataclass
class Site:
    metric: an.Metric
    unit: str
    machines: list[dict[str, Any]]
    environments: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    cells: list[dict[str, Any]]
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    stores: dict[str, str] = field(default_factory=dict)
    bisects: list[dict[str, Any]] = field(default_factory=list)
    tables: list[dict[str, Any]] = field(default_factory=list)  # per machine, precision x batch size (tables.py)
    headline: str = ""                                           # the index's first sentence
    said: list[tuple[str, str]] = field(default_factory=list)    # each change against the run before: (sentence, tone)
    charts: dict[str, Any] = field(default_factory=lambda: {"latest": None, "changed": None})  # the index's charts


def slug(*parts: Any) -> str:
    """A file name for a page: readable, safe on every filesystem, unique by its hash."""
    text = "|".join(map(str, parts))
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", str(parts[0]))[:40].strip("-.") or "x"
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def build(data: Loaded, metric: an.Metric) -> Site:
    df = data.repeats.copy()
    if df.empty:
        return Site(metric, metric.unit, [], [], [], [], stores=data.stores)
    df["run"] = _per_group(df, ["run_id", "origin"], strip)
    df["key"] = _per_group(df, ["cell_key", "origin"], strip)
    # The same repeat read from two stores (a store and one it was imported into) counts once.
    df = df.drop_duplicates(["origin", "run", "key", "repeat"], keep="first")
    unit = an.shown_unit(df["unit"].unique(), metric.name)  # every unit the site's repeats are in, not the commonest
    machines = _machines(df, data)
    label = {m["id"]: m["label"] for m in machines}
    df["run_slug"] = _per_group(df, ["run", "origin"], slug)
    df["cell_slug"] = _per_group(df, list(NAME_KEYS), slug)
    # A series is one definition on one machine (runner/analysis/identity.py): the cell key as its store wrote it,
    # the store, and the device where one key was measured on more than one.
    df["series"] = definition_ids(df.assign(cell_key=df["key"] + "@" + df["origin"].astype(str)))
    runs = _runs(df, data.runs, label, metric)
    cells, hist = cell_pages.cells(df, metric, label)
    envs = [{"name": env, "machines": sorted({label[o] for o in g["origin"].unique()}),
             "torch": ", ".join(sorted({str(t) for t in g["env_torch"].unique() if t == t and str(t)})),
             "runs": int(g["run_slug"].nunique()), "repeats": len(g)}
            for env, g in sorted(df.groupby("environment", sort=False), key=lambda kv: str(kv[0]))]
    site = Site(metric, unit, machines, envs, runs, cells, stores=data.stores)
    index.fill(site, hist, label)
    site.comparisons = _comparisons(data, machines, metric)
    site.tables = tables_.tables(newest(data), machines, metric)
    site.bisects = bisects(data.bisects, df, label)
    return site


def bisects(found: list[dict[str, Any]], df: pd.DataFrame, label: dict[str, str]) -> list[dict[str, Any]]:
    """Each stored bisect answer as the site shows it: when, on which machine, the cell, the ordered environments,
    the outcome in bisect's own words, the culprit pair (each environment linked to its cell's history where the
    site has it), and every pair it decided. The same answer read from two stores counts once."""
    first = df.drop_duplicates(["origin", "key"])
    slugs = {(str(o), str(k)): str(s) for o, k, s in zip(first["origin"].tolist(), first["key"].tolist(),
                                                          first["cell_slug"].tolist(), strict=True)}
    out, seen = [], set()
    for b in found:
        a = b["answer"]
        # The same row read twice (a store given twice, or with a copy of it) counts once; a copy's later answers
        # share its store id and their row ids, not their time or content.
        ident = (b["origin"], b["id"], b["started_at"], b["host"], json.dumps(a, sort_keys=True, default=str))
        if ident in seen:
            continue
        seen.add(ident)
        envs = [str(e) for e in a.get("environments") or []]
        keys = list(b["cell_keys"]) + [""] * max(0, len(envs) - len(b["cell_keys"]))
        link = {e: slugs.get((b["origin"], k), "") for e, k in zip(envs, keys, strict=False)}

        metric = an.METRICS.get(str(a.get("metric", "")))

        def pair(c: Any, link: dict[str, str] = link, metric: an.Metric | None = metric) -> dict[str, Any] | None:
            if not isinstance(c, dict):
                return None
            change = c.get("change")
            return {"a": str(c.get("a", "")), "b": str(c.get("b", "")), "a_slug": link.get(str(c.get("a")), ""),
                    "b_slug": link.get(str(c.get("b")), ""), "verdict": str(c.get("verdict", "")),
                    "why": str(c.get("why", "")),
                    "change": change_percent(float(change), metric) if isinstance(change, int | float)
                    and not isinstance(change, bool) and math.isfinite(change) else "",  # as bisect printed it
                    "p": _num(c.get("p_value")) if isinstance(c.get("p_value"), int | float) else ""}

        cost = a.get("cost") if isinstance(a.get("cost"), dict) else {}
        out.append({"when": when(b["started_at"]), "_t": b["started_at"], "machine": label.get(b["origin"],
                                                                                                 str(b["origin"])),
                    "host": b["host"], "cell": str(a.get("cell", "")), "metric": str(a.get("metric", "")),
                    "threshold": _num(100 * a["threshold"]) if isinstance(a.get("threshold"), int | float) else "",
                    "environments": [{"name": e, "slug": link[e]} for e in envs],
                    "outcome": str(a.get("outcome", "")), "why": str(a.get("why", "")),
                    "culprit": pair(a.get("culprit")), "decisions": [p for p in map(pair, a.get("decisions") or [])
                                                                      if p is not None],
                    "measured": f"{cost.get('repeats', '')} repeats of {cost.get('full_sweep', '')} a full sweep "
                                "would take" if cost else "",
                    "argv": " ".join(b["argv"])})
    out.sort(key=lambda r: (r["_t"], r["machine"], r["cell"]))
    return out


def _machines(df: pd.DataFrame, data: Loaded) -> list[dict[str, Any]]:
    """Each machine (the store that measured a repeat): its id, hosts, devices (each GPU or CPU by name), runs,
    repeats, first and last run, and where the site has its repeats from: a store published, or a file one of them
    imported (docs/exchange.md's provenance)."""
    came: dict[str, list[str]] = {}
    for i in data.imports:
        via = f" by way of store {', '.join(i['via'])}" if i["via"] else ""
        came.setdefault(str(i["origin"]), []).append(f"imported from {i['file']} on {when(i['last_imported'])[:10]}"
                                                      f"{via}")
    out = []
    for origin, g in sorted(df.groupby("origin", sort=False), key=lambda kv: str(kv[0])):
        hosts = sorted({str(h) for h in g["env_hostname"].dropna().unique() if h})
        hardware = sorted({str(h) for h in g["hardware"].unique() if h})
        # Where its repeats came from, as the stores' `imported` tables say; a store published that no other imported.
        source = "; ".join(dict.fromkeys(came.get(str(origin), []))) or ("a store published" if str(origin) in data.ids
                                                                          else "")
        out.append({"id": str(origin), "hosts": ", ".join(hosts), "hardware": ", ".join(hardware) or "device unknown",
                    "host": hosts[0] if hosts else str(origin), "source": source,
                    "repeats": len(g), "runs": int(g["run"].nunique()),
                    "first": when(g["started_at"].min()), "last": when(g["started_at"].max())})
    # A label names one machine: its host and enough of its store id to tell it from every other (two stores may
    # share a host name, and one store's id may begin another's).
    for m in out:
        mid, host = str(m["id"]), str(m["host"])
        n = next(k for k in (6, 8, 12, len(mid)) if k >= len(mid) or sum(
            str(o["host"]) == host and str(o["id"])[:k] == mid[:k] for o in out) == 1)
        m["label"] = f"{host} ({mid[:n]})"
    return out


def _per_group(df: pd.DataFrame, keys: list[str], fn: Any) -> list[Any]:
    """fn(*key) for each row, computed once per distinct key. The groups' first rows are found by position: the
    frame's index labels are not positions once rows were dropped (a repeat read from two stores)."""
    codes = df.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    if not len(codes):
        return []
    found, at = np.unique(codes, return_index=True)
    first = df[keys].iloc[at]
    values = {int(c): fn(*k) for c, k in zip(found, first.itertuples(index=False), strict=True)}
    return [values[int(c)] for c in codes]


def _joined(values: pd.Series) -> str:
    return ", ".join(sorted({str(v) for v in values if v is not None and v == v and str(v)}))


def _runs(df: pd.DataFrame, runs: pd.DataFrame, label: dict[str, str], metric: an.Metric) -> list[dict[str, Any]]:
    info = {(str(r["origin"]), str(r["run_id"])): r for r in runs.to_dict("records")} if not runs.empty else {}
    keys = ["run_slug", "cell_slug"]
    cells = df.groupby(keys, sort=False).agg(n=("status", "size")).reset_index()
    joined = {c: _joined_by(df, keys, c) for c in ("env_torch", "hardware")}
    cells["torch"] = [joined["env_torch"].get((a, b), "") for a, b in zip(cells["run_slug"], cells["cell_slug"],
                                                                           strict=True)]
    cells["hardware"] = [joined["hardware"].get((a, b), "") for a, b in zip(cells["run_slug"], cells["cell_slug"],
                                                                             strict=True)]
    finite = (df["status"] == "ok") & np.isfinite(df["value"].astype(float))
    ok = df[finite].groupby(keys, sort=False)["value"].agg(["mean", "std", "size"])
    statuses = df.groupby([*keys, "status"], sort=True).size()
    counts: dict[tuple[str, str], list[str]] = {}
    for (run_slug, cell_slug, status), k in statuses.items():
        counts.setdefault((run_slug, cell_slug), []).append(f"{k} {status}")
    names = df.drop_duplicates("cell_slug").set_index("cell_slug")[list(NAME_KEYS)].to_dict("index")
    per_run: dict[str, list[dict[str, Any]]] = {}
    for c in cells.to_dict("records"):
        stats = ok.loc[(c["run_slug"], c["cell_slug"])] if (c["run_slug"], c["cell_slug"]) in ok.index else None
        per_run.setdefault(c["run_slug"], []).append({
            "name": names[c["cell_slug"]], "slug": c["cell_slug"], "n": int(c["n"]),
            "statuses": ", ".join(counts[(c["run_slug"], c["cell_slug"])]),
            "figure": fmt.mean_std(stats["mean"] * metric.scale, stats["std"] * metric.scale, int(stats["size"]))
            if stats is not None else "", "torch": c["torch"], "hardware": c["hardware"]})
    by_run: dict[str, dict[str, int]] = {}
    for (run_slug, _, status), k in statuses.items():
        by_run.setdefault(run_slug, {})[status] = by_run.setdefault(run_slug, {}).get(status, 0) + int(k)
    head = df.assign(_ok=df["status"] == "ok", _seq=df["store"].astype("int64") * 10**9 + df["id"].astype("int64")
                     ).groupby("run_slug", sort=False).agg(
        run=("run", "first"), origin=("origin", "first"), t=("started_at", "min"), repeats=("status", "size"),
        ok=("_ok", "sum"), seq=("_seq", "min"))
    out = []
    for run_slug, r in head.iterrows():
        meta = info.get((str(r["origin"]), str(r["run"])), {})
        cells_of = sorted(per_run[str(run_slug)], key=lambda c: tuple(str(c["name"][k]) for k in NAME_KEYS))
        out.append({"id": str(r["run"]), "origin": str(r["origin"]), "machine": label[str(r["origin"])],
                    "slug": str(run_slug), "started": when(r["t"]), "_t": float(r["t"]),
                    "matrix": str(meta.get("matrix_name") or ""),
                    "status": run_status(str(meta.get("status") or ""), by_run.get(str(run_slug), {})),
                    "host": str(meta.get("host") or ""), "repeats": int(r["repeats"]), "cells": cells_of,
                    "ok": int(r["ok"]), "_seq": int(r["seq"])})
    # Each machine's runs newest first, in its store's order (never by the clocks, which may have been set back).
    out.sort(key=lambda r: (str(r["machine"]), -int(str(r["_seq"]))))
    return out


def _joined_by(df: pd.DataFrame, keys: list[str], column: str) -> dict[tuple[str, str], str]:
    """Per group of `keys`, the distinct values of `column` joined (sorted); read from the distinct rows only."""
    seen: dict[tuple[str, str], set[str]] = {}
    for a, b, v in df[[*keys, column]].drop_duplicates().itertuples(index=False):
        if v is not None and v == v and str(v):
            seen.setdefault((a, b), set()).add(str(v))
    return {k: ", ".join(sorted(v)) for k, v in seen.items()}


def _num(v: Any) -> str:
    return f"{float(v):.4g}" if v is not None and not (isinstance(v, float) and math.isnan(v)) else ""


def newest(data: Loaded) -> pd.DataFrame:
    """Each store's newest repeats as the analysis frame, every one named by the store that measured it (a store's
    own under its id, as an import names them), a repeat read from two stores once: what `machine:ID` selects."""
    df = data.latest
    if df.empty:
        return df
    sids = data.ids
    origin = [r.rpartition("@")[2] if "@" in r else sids[s] for r, s in zip(df["run_id"], df["store"], strict=True)]
    df = df.assign(origin=origin, run_id=[f"{strip(r, o)}@{o}" for r, o in zip(df["run_id"], origin, strict=True)],
                   cell_key=[f"{strip(k, o)}@{o}" for k, o in zip(df["cell_key"], origin, strict=True)],
                   id=df["store"] * 10**9 + df["id"])
    return df.drop_duplicates(["run_id", "cell_key", "repeat"], keep="first").reset_index(drop=True)


def _comparisons(data: Loaded, machines: list[dict[str, Any]], metric: an.Metric) -> list[dict[str, Any]]:
    """Every pair of machines through `compare`: their newest repeats of each cell, paired on the environment and the
    params, with the compare core's ratio, p-value (adjusted over the pairs), verdict and tone; where nothing pairs,
    one sentence says why."""
    df = newest(data)
    if df.empty or len(machines) < 2:
        return []
    out = []
    for i, a in enumerate(machines):
        for b in machines[i + 1:]:
            sa, sb = an.select_side(df, f"machine:{a['id']}"), an.select_side(df, f"machine:{b['id']}")
            c = an.compare(sa, sb, metric)
            rows = []
            for r in c.pairs.to_dict("records"):
                said = tone.pair_said(r, metric, "B", "A")
                # As compare's table: each side with its failures; a pair its failures decided shows the change of
                # its ok repeats uncoloured and no speed p (its verdict, with its own test, is what decided).
                held = tone.by_outcomes(r)
                rows.append({"environment": r["environment"], "model": r["model"], "precision": r["precision"],
                             "batch": r["batch_size"], "options": r["options"],
                             "a": pair_views.side_cell(r, "a", metric).text,
                             "b": pair_views.side_cell(r, "b", metric).text,
                             "ratio": fmt.number(r["ratio"], 3), "change": r["change"] or "",
                             "interval": tone.interval(r["ratio"], r.get("ratio_low"), r.get("ratio_high"), metric)
                             if held else said.interval, "p": fmt.DASH if held else fmt.p_value(r["p_adjusted"]),
                             "verdict": str(r["verdict"]), "tone": said.tone.value,
                             "change_tone": tone.Tone.NONE.value if held else said.tone.value})
            n_a = int((c.unpaired["side"] == "A").sum()) if len(c.unpaired) else 0
            n_b = len(c.unpaired) - n_a
            summary = f"{pair_views.geomean_sentence(c, 'A', 'B')}. {pair_views.decisions_sentence(c)}" if rows else (
                f"No cell was measured on both machines: pairs need the same environment and params on each, and "
                f"{a['label']} has {n_a} cell{'s' if n_a != 1 else ''} that {b['label']} lacks, {b['label']} "
                f"{n_b} that {a['label']} lacks.")
            out.append({"a": a["label"], "b": b["label"], "pairs": rows, "summary": summary,
                        "unpaired": len(c.unpaired)})
    return out
