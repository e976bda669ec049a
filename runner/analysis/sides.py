"""Which repeats form a side: the one function every command asks (docs/architecture.md, "Which repeats form a side").

A cell's identity is its definition and its machine (runner/analysis/identity.py): the machine is the store that
measured a repeat (an imported repeat's origin store, this store for its own) and its device. A side named by an
environment, a tag, a backend or a run takes the repeats of ONE machine: this store's own where it has any; else the
one machine that measured it; else a one-line refusal that lists the machines and how to name one (`a@machine:ID`).
A local verdict never pools or replaces this store's repeats with another machine's.

A side may name its machine (`a@machine:ID`, `a@host:NAME`), or be a whole machine (`machine:ID`, `host:NAME`): a
machine is its store id or its hardware in words, a host its name, each matched whole (never by prefix); one that
names several machines, or none, is refused with the list. Two whole machines pair their cells on the environment
as well as the params (`pair_keys`): one machine's `metal` is never paired with another's `container`. So do two
sides that hold an environment in common where one of them holds several (two runs, two tags, a machine against a
run): one environment's cell is never paired with another's, whichever is each side's newest of the params.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from runner.analysis.frame import CELL_KEYS, PARAM_KEYS, latest
from runner.analysis.identity import devices, origins
from runner.base.errors import ConfigError
from runner.record.provenance import Provenance, day

SIDE_KINDS = ("env", "tag", "backend", "run")
# Sides named only with their prefix: the machine a repeat ran on. `host:NAME` its host name; `machine:X` its
# hardware in words (as the environments table shows it) or the id of the store that measured it.
MACHINE_KINDS = ("host", "machine")


@dataclass(frozen=True)
class Machine:
    """One machine's part of a selection: its store id ("" for this store when its id is not known), whether it is
    this store, the hosts and hardware its repeats recorded, how many repeats, and when they were measured."""

    id: str
    local: bool
    hosts: tuple[str, ...]
    hardware: tuple[str, ...]
    repeats: int
    first: float = math.nan
    last: float = math.nan
    provenance: Provenance | None = None

    @property
    def ref(self) -> str:
        """How a side names it."""
        return f"machine:{self.id}" if self.id else "this store"

    def words(self) -> str:
        """'machine:709c470fbcc6 (host box2; AMD EPYC (2 CPUs); measured 2026-11-20 – 2026-11-24; imported from
        box2.jsonl.gz on 2026-11-24)'."""
        bits = ["this store" if self.local else ""]
        if self.hosts:
            bits.append(f"host {', '.join(self.hosts)}")
        bits.append(", ".join(self.hardware) or "device unknown")
        first, last = day(self.first), day(self.last)
        if first != "?":
            bits.append(f"measured {first}" if first == last else f"measured {first} – {last}")
        if not self.local and self.provenance is not None:
            bits.append(self.provenance.words())
        name = f"machine:{self.id}" if self.id else "this store"
        return f"{name} ({'; '.join(b for b in bits if b and b != name)})"

    def as_json(self) -> dict[str, object]:
        p = self.provenance
        return {"id": self.id, "local": self.local, "hosts": list(self.hosts), "hardware": list(self.hardware),
                "repeats": self.repeats, "first": None if math.isnan(self.first) else self.first,
                "last": None if math.isnan(self.last) else self.last,
                "imported_from": list(p.files) if p else [], "via": list(p.via) if p else [],
                "imported_at": None if p is None or math.isnan(p.last_imported) else p.last_imported}


@dataclass(frozen=True)
class Selection:
    """The rows a side selects (each repeat's newest row), how its reference was understood, what its cells pair
    on (`keys`), the machines its repeats come from, and the other machines that measured what it names."""

    ref: str
    kind: str
    value: str
    frame: pd.DataFrame
    keys: tuple[str, ...] = PARAM_KEYS
    machines: tuple[Machine, ...] = ()
    left_out: tuple[Machine, ...] = ()

    @property
    def whole_machine(self) -> bool:
        return self.keys == CELL_KEYS


def machines(df: pd.DataFrame, here: str = "", provenance: Mapping[str, Provenance] | None = None
             ) -> tuple[Machine, ...]:
    """The machines of these rows, this store first, then by store id."""
    if df.empty:
        return ()
    origin, hw = origins(df), devices(df)
    out = []
    for o in sorted(set(origin), key=lambda o: (o != "", o)):
        mine = origin == o
        hosts = tuple(sorted({str(h) for h in df.loc[mine, "env_hostname"] if h})) if "env_hostname" in df else ()
        started = df.loc[mine, "started_at"].astype(float) if "started_at" in df else pd.Series(dtype=float)
        out.append(Machine(o or here, o == "", hosts, tuple(sorted({h for h in hw[mine] if h})), int(mine.sum()),
                           float(started.min()) if len(started) else math.nan,
                           float(started.max()) if len(started) else math.nan,
                           (provenance or {}).get(o)))
    return tuple(out)


def split(ref: str) -> tuple[str, tuple[str, str] | None]:
    """(the name part, (machine kind, value) or None): `machine:X`, `host:X`, `NAME@machine:X`, `NAME@host:X`."""
    kind, sep, value = ref.partition(":")
    if sep and kind in MACHINE_KINDS:
        return "", (kind, value)
    at = max(ref.rfind(f"@{k}:") for k in MACHINE_KINDS)
    if at > 0:
        kind, _, value = ref[at + 1:].partition(":")
        return ref[:at], (kind, value)
    return ref, None


def _listed(ms: Sequence[Machine]) -> str:
    return "; ".join(m.words() for m in ms)


def machine_mask(df: pd.DataFrame, kind: str, value: str, here: str = "") -> pd.Series:
    """The rows of the one machine `host:VALUE` or `machine:VALUE` names, matched whole; one that names no machine or
    several is a ConfigError that lists the machines."""
    origin = origins(df)
    every = machines(df, here)
    if kind == "host":
        mask = (df["env_hostname"] == value) if value else pd.Series(False, index=df.index)
        if not mask.any():
            known = sorted({str(h) for h in df["env_hostname"] if h})
            raise ConfigError(f"'host:{value}' matches no result in the store; host: {', '.join(known) or '(none)'}")
    else:
        store = origin == ("" if value and value == here else value)
        hw = devices(df) == value
        if store.any() and hw.any() and set(origin[hw]) != set(origin[store]):
            raise ConfigError(f"'machine:{value}' is both a store id and another machine's hardware; machines: "
                              f"{_listed(every)}")
        mask = store if store.any() else hw
        if not value or not mask.any():
            raise ConfigError(f"'machine:{value}' matches no machine in the store (a store id or a hardware name, "
                              f"written whole); machines: {_listed(every) or '(none)'}")
    owners = set(origin[mask])
    if len(owners) > 1:
        named = [m for m in every if (m.id if not m.local else "") in owners or (m.local and "" in owners)]
        raise ConfigError(f"'{kind}:{value}' names {len(owners)} machines: {_listed(named)}; name one by its store "
                          "id, machine:ID")
    return mask


def _named(df: pd.DataFrame, ref: str) -> tuple[str, str, pd.Series]:
    """(kind, value, rows) of a name: an environment, else a tag, else a backend kind, else a run id or a prefix of
    one (a whole id first); `env:`, `tag:`, `backend:` or `run:` in front chooses the kind when names clash."""
    kind, sep, value = ref.partition(":")
    kinds: Sequence[str] = (kind,) if sep and kind in SIDE_KINDS else SIDE_KINDS
    if not (sep and kind in SIDE_KINDS):
        value = ref
    for k in kinds:
        if k == "env":
            mask = df["environment"] == value
        elif k == "tag":
            mask = df["tags"].map(lambda tags: value in tags)
        elif k == "backend":
            mask = df["backend"] == value
        else:
            runs = set(df["run_id"])
            run_ids = [value] if value in runs else sorted({r for r in runs if r.startswith(value)}) if value else []
            if len(run_ids) > 1:
                raise ConfigError(f"run id prefix {value!r} is ambiguous: {', '.join(run_ids)}")
            mask = df["run_id"].isin(run_ids)
        if bool(mask.any()):
            return k, value, mask
    sides = available_sides(df)
    listed = "; ".join(f"{k}: {', '.join(v) if v else '(none)'}" for k, v in sides.items())
    raise ConfigError(f"{ref!r} matches no result in the store. Sides that exist: {listed}")


def available_sides(df: pd.DataFrame) -> dict[str, list[str]]:
    """What a compare side may name, from the rows in the store."""
    return {
        "env": sorted(set(df["environment"])),
        "tag": sorted({t for tags in df["tags"] for t in tags}),
        "backend": sorted(set(df["backend"])),
        "run": sorted(set(df["run_id"])),
    }


def one_machine(rows: pd.DataFrame, ref: str, here: str = "",
                provenance: Mapping[str, Provenance] | None = None) -> tuple[pd.DataFrame, tuple[Machine, ...]]:
    """The rows of ONE machine, and the machines left out: this store's own where it has any, else the one machine
    that measured them; several machines and none of them this store is a ConfigError that lists them."""
    origin = origins(rows)
    owners = set(origin)
    if len(owners) <= 1:
        return rows, ()
    if "" in owners:
        return rows[origin == ""], machines(rows[origin != ""], here, provenance)
    every = machines(rows, here, provenance)
    name = split(ref)[0] or ref
    raise ConfigError(f"{ref!r} was measured on {len(every)} machines, none of them this store: {_listed(every)}; "
                      f"name one, e.g. {name}@machine:{every[0].id}")


def select(df: pd.DataFrame, ref: str, here: str = "", provenance: Mapping[str, Provenance] | None = None
           ) -> Selection:
    """The repeats side `ref` stands for (each repeat's newest row), as every command takes them: compare, the gate,
    check, history, bisect, diff, report and publish. `here`: this store's id (so that `machine:<it>` names this
    store's own repeats); `provenance`: each imported machine's, by store id, for the words a header shows."""
    name, machine_ref = split(ref)
    if machine_ref is not None:
        kind, value = machine_ref
        df = df[machine_mask(df, kind, value, here)]
        if not name:
            return Selection(ref, kind, value, latest(df), CELL_KEYS, machines(df, here, provenance))
    kind, value, mask = _named(df, name)
    rows, left_out = one_machine(df[mask], ref, here, provenance)
    return Selection(ref, kind, value, latest(rows), PARAM_KEYS, machines(rows, here, provenance), left_out)
