"""The kit's results per cell (`CellResult`: its stored repeats summarised) and the small formatting helpers
the report page (runner/kit/tables.py) uses; `published` reads the write-ups' published figures."""

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

    def __init__(self, cell: KitCell, rows: Sequence[Mapping[str, Any]]) -> None:
        self.cell = cell
        self.rows = list(rows)
        self.ok = [r for r in self.rows if r["status"] == "ok"]
        self.statuses = an.status_summary(_count(r["status"] for r in self.rows))

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
        return sum(1 for r in self.ok if ((r.get("metrics") or {}).get("telemetry") or {}).get("throttled") is True)

    def telemetry(self, path: Sequence[str]) -> list[float]:
        out = []
        for r in self.ok:
            node: Any = (r.get("metrics") or {}).get("telemetry") or {}
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


def _metric(row: Mapping[str, Any], key: str) -> float | None:
    m = row.get("metrics") or {}
    if key == "iter_time":
        times = [t for t in m.get("iter_times") or [] if isinstance(t, int | float)]
        return sum(times) / len(times) if times else None
    if key == "peak_mem":
        v = m.get("peak_mem_allocated")
        if v is None:
            v = m.get("peak_mem_reserved")
        return float(v) if isinstance(v, int | float) else None
    if key in ("fwd_throughput", "bwd_throughput"):
        b = m.get("breakdown") or {}
        secs = b.get("forward_s" if key == "fwd_throughput" else "backward_s")
        images = m.get("images")
        return images / secs if secs and images else None
    if key == "data_wait":
        w, d = m.get("window_s"), m.get("data_wait_s")
        return d / w if w and d is not None else None
    v = m.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _ratio(a: float, b: float) -> str:
    return fmt.ratio(a / b) if a and b and not (math.isnan(a) or math.isnan(b)) else DASH


def _num(x: Any, places: int | None = None) -> str:
    return fmt.number(x, places)


def _md(table: Table) -> str:
    return str(fmt.md_table(table))
