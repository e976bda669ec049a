"""`matrix publish`: a static site of one or more stores (docs/publish.md)."""

from __future__ import annotations

from pathlib import Path

from runner.base.errors import ConfigError
from runner.publish import publish


def publish_command(dbs: list[Path], out: Path, metric: str) -> str:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"-o {out} is a file: pass a folder for the site")
    if len(set(map(str, dbs))) != len(dbs):
        raise ConfigError("--db: the same store is named twice")
    files = publish(dbs, out, metric)
    return f"published {len(files)} files from {len(dbs)} store{'s' if len(dbs) != 1 else ''} -> {out / 'index.html'}"
