"""The kit's results per cell (`CellResult`: its stored repeats summarised) and the small formatting helpers
the report page (runner/kit/evidence_page.py) uses; `published` reads the write-ups' published figures."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import analysis as an
from runner.report import fmt
from runner.report.fmt import DASH, Table

if TYPE_CHECKING:
    from runner.kit.settings import KitCell

PUBLISHED_PATH = Path(__file__).with_name("published.json")
MIB = 2**20


def published() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PUBLISHED_PATH.read_text())
    return data


class CellResult:
    """One kit cell's stored repeats, summarised."""

    def __init__(self, cell: KitCell, rows: Sequence[an.Repeat]) -> None:
        self.cell = cell
        self.rows = list(rows)
        self.ok = [r for r in self.rows if r.ok]
        self.statuses = an.status_summary(_count(r.status for r in self.rows))

    def values(self, key: str, scale: float = 1.0) -> list[float]:
        out = []
        for r in self.ok:
            v = _metric(r, key)
            if v is not None:
                out.append(v * scale)
        return out

    def stats(self, key: str, scale: float = 1.0) -> an.Stats:
        return an.describe(self.values(key, scale))

    def text(self, key: str, scale: float = 1.0) -> str:
        """'mean ± std' of the ok repeats, or what became of them."""
        st = self.stats(key, scale)
        if st.n == 0:
            return _not_ok(self.statuses) or DASH
        return fmt.mean_std(st.mean, st.std, st.n)

    def mean(self, key: str, scale: float = 1.0) -> float:
        return self.stats(key, scale).mean

    @property
    def throttled(self) -> int:
        return sum(1 for r in self.ok if (r.metrics.get("telemetry") or {}).get("throttled") is True)

    def telemetry(self, path: Sequence[str]) -> list[float]:
        out = []
        for r in self.ok:
            node: Any = r.metrics.get("telemetry") or {}
            for p in path:
                node = node.get(p) if isinstance(node, Mapping) else None
            if isinstance(node, int | float):
                out.append(float(node))
        return out


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _not_ok(statuses: str) -> str:
    return ", ".join(p for p in statuses.split(", ") if p and not p.endswith(" ok"))


def _metric(row: an.Repeat, key: str) -> float | None:
    """A figure of one admitted repeat: a metric of the table read as every report reads it (runner/analysis/
    metrics.py), else the result's own field (peak_flops); None when not measured."""
    if key in an.METRICS:
        v = an.METRICS[key].read(row.metrics, row.raw)
        return v if v == v else None
    found = row.metrics.get(key)
    return float(found) if isinstance(found, int | float) and not isinstance(found, bool) else None


def _ratio(a: float, b: float) -> str:
    return fmt.ratio(a / b) if a and b and not (math.isnan(a) or math.isnan(b)) else DASH


def _num(x: Any, places: int | None = None) -> str:
    return fmt.number(x, places)


def _md(table: Table) -> str:
    return str(fmt.md_table(table))
