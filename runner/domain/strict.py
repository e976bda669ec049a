"""The base of every model read from matrix.yaml, and the limits they share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

Scalar = str | int | float | bool
MOST_REPEATS = 1000  # repeats per cell, fixed or adaptive: more is a typo (each is a fresh process)
LONGEST_TIMEOUT = 30 * 86400.0  # seconds per repeat: 30 days; a Slurm time limit is derived from it


class Strict(BaseModel):
    """Every model of matrix.yaml rejects keys it does not know."""

    model_config = ConfigDict(extra="forbid", frozen=True)
