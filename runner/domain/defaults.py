"""What a matrix's commands read before anything heavy (standard library only: `matrix --help` and `matrix show` read
these without pydantic): the store a command uses unless told, the most cells a matrix may expand to, the axes of a process layout, and which params are
worth showing a person."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_DB = Path("results/matrix.db")  # the result store every command reads and writes unless --db says otherwise
MAX_CELLS = 10_000  # more cells than this is most likely a typo in an axis: refused unless --max-cells says so
LAYOUT_AXES = ("gpus", "nodes")  # how many processes a backend starts, not bench.py options


def shown_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The params worth showing a person: a process layout of 1 is the default and says nothing."""
    return {k: v for k, v in params.items() if not (k in LAYOUT_AXES and v == 1)}
