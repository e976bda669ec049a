"""The regression gate written in matrix.yaml, so that `matrix run` decides it (and, with `repeats: {until: decided}`
or `--until-decided`, measures until it is decided):

```yaml
gate:
  - {a: one, b: no-simd, fail_on: "slower:3%"}         # the sides `matrix compare A B` takes; one rule or a list
  - {a: baseline, b: candidate, fail_on: [slower:2%, memory:5%], undecided: pass}
```

Each entry is the gate of `matrix compare A --fail-on ...` (runner/analysis/gate.py) over this store's repeats of the
selected cells; a side is an environment of the file, or `tag:NAME` / `backend:KIND` that names at least one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from runner.analysis import gate, significance
from runner.analysis.compare import pair_keys, same_definition, select_side
from runner.analysis.verdict import UNDECIDED_POLICIES
from runner.base.errors import ConfigError

KEYS = ("a", "b", "fail_on", "undecided")
Locate = Callable[[Sequence[Any]], str]


@dataclass(frozen=True)
class GateEntry:
    """One entry of `gate:`: side A, side B, the rules, and how its undecided checks count."""

    index: int
    a: str
    b: str
    rules: tuple[gate.Rule, ...]
    undecided: str = "error"

    @property
    def specs(self) -> list[str]:
        return [r.text for r in self.rules]

    @property
    def title(self) -> str:
        return f"{self.b} against {self.a} ({', '.join(self.specs)})"


def _names(side: str, environments: Sequence[Mapping[str, Any]]) -> list[str]:
    """The environments a side names (none: a mistake)."""
    kind, sep, value = side.partition(":")
    if sep and kind in ("env", "tag", "backend"):
        field = {"env": "name", "tag": "tags", "backend": "backend"}[kind]
        return [str(e.get("name")) for e in environments
                if value == e.get(field) or (field == "tags" and value in (e.get("tags") or ()))]
    return [str(e.get("name")) for e in environments if e.get("name") == side]


def parse(raw: Any, locate: Locate, environments: Sequence[Mapping[str, Any]]) -> tuple[GateEntry, ...]:
    """Validate `gate:`; every mistake is one line naming the field, all mistakes together."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{locate(('gate',))}: expected a list of {{a: ENV, b: ENV, fail_on: 'slower:3%'}}")
    problems: list[str] = []
    out = []
    names = ", ".join(str(e.get("name")) for e in environments)
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            problems.append(f"{locate(('gate', i))}: expected a mapping such as {{a: one, b: two, fail_on: 'slower:3%'}}")
            continue
        problems += [f"{locate(('gate', i, k))}: unknown key {k!r}; allowed: {', '.join(KEYS)}" for k in entry
                     if k not in KEYS]
        sides = []
        for k in ("a", "b"):
            side = entry.get(k)
            if not isinstance(side, str) or not side:
                problems.append(f"{locate(('gate', i))}: `{k}` is required: an environment ({names}), tag:NAME or "
                                "backend:KIND")
            elif not _names(side, environments):
                problems.append(f"{locate(('gate', i, k))}: {side!r} names no environment of the matrix; "
                                f"environments: {names}")
            sides.append(side if isinstance(side, str) else "")
        specs = entry.get("fail_on")
        specs = [specs] if isinstance(specs, str) else specs
        rules: list[gate.Rule] = []
        if not isinstance(specs, list) or not specs or not all(isinstance(s, str) for s in specs):
            problems.append(f"{locate(('gate', i, 'fail_on'))}: expected a rule such as slower:3% or a list of them")
        else:
            try:
                rules = gate.parse_rules(specs)
            except ConfigError as e:
                problems.append(f"{locate(('gate', i, 'fail_on'))}: {str(e).removeprefix('--fail-on ')}")
        policy = entry.get("undecided", "error")
        if policy not in UNDECIDED_POLICIES:
            problems.append(f"{locate(('gate', i, 'undecided'))}: {policy!r} is not allowed; allowed: "
                            f"{', '.join(UNDECIDED_POLICIES)} (default error: exit status 5)")
        out.append(GateEntry(i, sides[0], sides[1], tuple(rules), str(policy)))
    if problems:
        raise ConfigError("\n".join(problems))
    return tuple(out)


def environments(entry: GateEntry, envs: Sequence[Any]) -> tuple[set[str], set[str]]:
    """The environments (of the matrix) each side names."""
    as_dicts = [{"name": e.name, "tags": list(getattr(e, "tags", []) or []), "backend": getattr(e, "backend", "")}
                for e in envs]
    return set(_names(entry.a, as_dicts)), set(_names(entry.b, as_dicts))


def empty_side(entry: GateEntry, frame: pd.DataFrame) -> str:
    """Which side holds no repeat in the frame, in words."""
    out = []
    for label, side in (("A", entry.a), ("B", entry.b)):
        try:
            select_side(frame, side)
        except ConfigError:
            out.append(f"{label}: {side}")
    return ", ".join(out) or "no pair of cells"


def evaluate(entry: GateEntry, frame: pd.DataFrame, alpha: float = significance.ALPHA) -> list[gate.GateCheck]:
    """The entry's checks over a frame of this store's repeats (the sides `matrix compare` takes), at `alpha`."""
    if frame.empty:
        return []
    try:
        side_a, side_b = select_side(frame, entry.a), select_side(frame, entry.b)
    except ConfigError:
        return []  # a side with nothing stored yet: nothing to check
    return gate.evaluate(side_a.frame, side_b.frame, entry.rules, alpha, keys=pair_keys(side_a, side_b),
                         same_definition=same_definition(side_a, side_b))
