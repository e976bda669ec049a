"""Where an imported machine's repeats came from (the `imported` table, runner/store/exchange.py `provenance`): part
of the record, so the store builds it without the statistics that later name the machine (runner/analysis/sides.py)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Provenance:
    """Where an imported machine's repeats came from: the files (as `matrix import` was given them), when they were
    imported, the stores they passed through on the way (an export of an import) and the matrix that exported them."""

    files: tuple[str, ...] = ()
    first_imported: float = math.nan
    last_imported: float = math.nan
    via: tuple[str, ...] = ()
    exported_by: str = ""

    def words(self) -> str:
        when = day(self.first_imported) if day(self.first_imported) == day(self.last_imported) else \
            f"{day(self.first_imported)} – {day(self.last_imported)}"
        files = ", ".join(self.files) or "?"
        via = f" by way of store {', '.join(self.via)}" if self.via else ""
        return f"imported from {files} on {when}{via}"


def day(t: float) -> str:
    """A time as its UTC day ('2026-11-24'), '?' when it is not known."""
    return time.strftime("%Y-%m-%d", time.gmtime(t)) if isinstance(t, float | int) and math.isfinite(t) else "?"
