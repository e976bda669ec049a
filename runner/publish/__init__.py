"""A static results site from one or more stores (docs/publish.md): load (lean rows, the machine of each),
model (histories, changes, cross-machine verdicts), svg (the plots), site (pages through autoescaped templates)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runner.base.gcpause import batch
from runner.publish import load, model, site


@batch
def publish(dbs: Sequence[Path], out: Path, metric: str = "throughput") -> list[Path]:
    """Build the site of `dbs` into `out`; returns the files written."""
    m = load.history_metric(metric)
    return site.write(model.build(load.load(dbs, m), m), out)


__all__ = ["publish"]
