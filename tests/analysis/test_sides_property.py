"""The sides property (issue 37): over generated stores of several machines (some repeats measured here, others
imported from other machines' exports, definitions changed between runs, environments measured on one machine or
several), every command takes the same repeats for the same side: compare, the gate, check, history, bisect, diff,
the report and the site; and where the side cannot be one machine's, every command that decides refuses or is
undecided. The stores are made as a team makes them: fill_history on each machine, export, import."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runner.analysis as an
from runner.analysis import references
from runner.analysis.bounds import Bound
from runner.base.errors import ConfigError
from runner.bisect.store_measure import StoreMeasure
from runner.commands.decide import gate_result
from runner.commands.export import export_command
from runner.commands.import_ import import_command
from runner.publish import load as site_load
from runner.publish import model as site_model
from runner.report import _history, compare_command, newest, views
from runner.report.diff import side_of
from runner.store import Store
from runner.store.exchange import store_id
from tests.store.synthetic import fill_history

ENVS = ("a", "b")
runs_of = st.lists(st.tuples(st.sampled_from([20, 50]), st.sampled_from([100.0, 50.0])), min_size=1, max_size=3)
machine = st.fixed_dictionaries({"cpu": st.sampled_from(["AMD EPYC", "Intel Xeon"]),
                                 "envs": st.dictionaries(st.sampled_from(ENVS), runs_of, max_size=2)})


def build(folder: Path, local: dict[str, Any], others: list[dict[str, Any]], local_first: bool) -> Path:
    """The team's store: its own runs (`local`) and each other machine's, exported and imported, in either order."""
    team = folder / "team.db"
    clock = iter(range(10_000))

    def measure(db: Path, host: str, spec: dict[str, Any]) -> None:
        for env, runs in spec["envs"].items():
            for iterations, level in runs:
                k = next(clock)
                fill_history(db, host, spec["cpu"], runs=1, repeats=3, cells=1, seed=1000 + k, environment=env,
                             first_run=1.7e9 + k * 86400, iterations=iterations, step_at=0, step=level / 100)

    def imports() -> None:
        for i, spec in enumerate(others):
            if spec["envs"]:
                measure(folder / f"m{i}.db", f"m{i}", spec)
                export_command(folder / f"m{i}.db", folder / f"m{i}.jsonl.gz", None, None)
                import_command(team, [folder / f"m{i}.jsonl.gz"])

    if not local_first:
        imports()
    measure(team, "team", local)
    if local_first:
        imports()
    return team


def owners(local: dict[str, Any], others: list[dict[str, Any]], env: str) -> tuple[bool, int]:
    """(measured here, how many other machines measured it)."""
    return env in local["envs"], sum(env in o["envs"] for o in others)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(local=machine, others=st.lists(machine, max_size=2), local_first=st.booleans())
def test_every_command_takes_the_same_repeats_for_a_side(local: dict[str, Any], others: list[dict[str, Any]],
                                                         local_first: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        team = build(Path(tmp), local, others, local_first)
        if not team.exists():
            return
        with Store(team, readonly=True) as store:
            every = an.frame(store.rows(latest_only=False))
            here = store_id(store) or ""
        for env in ENVS:
            mine, elsewhere = owners(local, others, env)
            if not (mine or elsewhere):
                continue
            if not mine and elsewhere > 1:
                refused(team, every, env, here)
                continue
            agree(team, every, env, here, "" if mine else None)


def refused(team: Path, every: pd.DataFrame, env: str, here: str) -> None:
    """Several machines measured `env`, none of them this store: whose would it be? Each deciding command says so."""
    with pytest.raises(ConfigError, match=f"'{env}' was measured on 2 machines, none of them this store"):
        an.select_side(every, env, here=here)
    with pytest.raises(ConfigError, match="none of them this store"):
        compare_command(team, env, env, "json")
    with Store(team, readonly=True) as store, pytest.raises(ConfigError, match="none of them this store"):
        side_of(store, env)
    keys = {k.partition("@")[0] for k in every.loc[every["environment"] == env, "cell_key"]}
    (j,) = references.judge([reference(env)], [cell(env, sorted(keys)[0])], an.frame(newest_rows(team)))
    assert j.verdict.value == "undecided" and "none of them this store" in j.reason


def reference(env: str) -> references.Reference:
    return references.Reference(0, {"environment": (env,)}, {"throughput": Bound(min=0)})


def cell(env: str, key: str) -> Any:
    """What check and bisect read of a matrix's cell: its key, environment, params and workload."""
    return SimpleNamespace(key=key, env_name=env, workload=None,
                           params={"model": "resnet50", "precision": "fp32", "batch_size": 32, "dataset": "synthetic"})


def newest_rows(team: Path) -> list[an.StoredRepeat]:
    with Store(team, readonly=True) as store:
        return list(store.rows())


def agree(team: Path, every: pd.DataFrame, env: str, here: str, local: str | None) -> None:
    """Every command takes the repeats compare takes for side `env`: one machine's (this store's when it measured it),
    its newest definition, each repeat's newest row."""
    side = an.select_side(every, env, here=here)
    chosen = side.chosen
    origin = str(chosen["origin"].iloc[0])
    assert set(chosen["origin"]) == {origin} and (local is None or origin == local)
    ok = chosen.loc[chosen["status"] == "ok", "throughput"].to_numpy(dtype=float)
    mean, key = float(ok.mean()), str(chosen["cell_key"].iloc[0])

    # The gate: the same cell, the same repeats.
    (check,) = gate_result(every, env, env, ["slower:5%"], here=here)[1]
    assert check.a_n == len(ok) and math.isclose(check.a_mean, mean)
    # check (references): the matrix's cell of that definition, judged on the same repeats.
    (j,) = references.judge([reference(env)], [cell(env, key.partition("@")[0])], an.frame(newest_rows(team)))
    assert j.n == len(ok) and math.isclose(j.measured, mean), (j.reason, j.n, len(ok))
    # The history: the last point of that definition on that machine.
    with Store(team, readonly=True) as store:
        rows = list(store.rows(latest_only=False))
        diffed = side_of(store, env)
        sample = StoreMeasure(None, [cell(env, key.partition("@")[0])], store, an.METRICS["throughput"],  # type: ignore[arg-type]
                              workdir=team.parent).sample(0, 4)  # repeats 1 to 3
    hist = _history(rows)
    mine = hist[(hist["environment"] == env) & (hist["machine"] == origin) & (hist["cell_key"] == key)]
    if len(mine):
        assert math.isclose(float(mine["mean"].iloc[-1]), mean)
    # diff: the newest repeat of the same machine.
    assert an.frame(an.StoredRepeat.many([{"run_id": diffed.run_id}]))["origin"].iloc[0] == origin
    # bisect measures here: the repeats of this store's own cell, the same ones when the side is this store's.
    if origin == "":
        assert sorted(sample.values) == sorted(ok.tolist())
    else:
        assert sample.values == ()
    # The report: the rows it shows for that environment on that machine.
    model = views.build(an.frame(newest(rows)), [], "x", hist)
    shown = model.shown
    names = shown["environment_name"] if "environment_name" in shown else shown["environment"]
    assert set(shown.loc[(names == env) & (shown["origin"] == origin), "id"]) == set(chosen["id"])
    # The site: that machine's history of the cell ends with the same mean.
    metric = an.METRICS["throughput"]
    site = site_model.build(site_load.load([team], metric), metric)
    label = next(m["label"] for m in site.machines if m["id"] == (origin or here))
    (page,) = [c for c in site.cells if c["name"]["environment"] == env]
    (table,) = [t for t in page["tables"] if t["machine"] == label]
    shown_mean = float(str(table["points"][-1]["figure"]).split(" ±")[0].replace(",", ""))
    assert math.isclose(shown_mean, mean, rel_tol=5e-3) and table["points"][-1]["key"] == key.partition("@")[0]
    (shown_in_tables,) = [t for t in site.tables if t["id"] == (origin or here)]
    cells = [c for b in shown_in_tables["blocks"] if b["title"].startswith(f"{env} ·") for r in b["rows"]
             for c in r["cells"]]
    assert [c["n"] for c in cells] == [len(ok)] and np.isclose(float(cells[0]["text"].split(" ")[0]), mean, rtol=1e-3)
