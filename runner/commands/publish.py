"""`matrix publish`: a static site of one or more stores (docs/publish.md)."""

from __future__ import annotations

from pathlib import Path

from runner.base.errors import ConfigError
from runner.commands.base import Command, register
from runner.domain.defaults import DEFAULT_DB


@register
class PublishCommand(Command):
    name = "publish"
    help = ("Write a static site (opens from file://): machines, environments, runs, each cell's history with its "
            "changes.")

    def run(self, out: Path, db: list[Path] | None, metric: str) -> int:
        dbs = db or [DEFAULT_DB]
        if out.exists() and not out.is_dir():
            raise ConfigError(f"-o {out} is a file: pass a folder for the site")
        if len(set(map(str, dbs))) != len(dbs):
            raise ConfigError("--db: the same store is named twice")
        from runner.publish import publish
        files = publish(dbs, out, metric)
        self.say(f"published {len(files)} files from {len(dbs)} store{'s' if len(dbs) != 1 else ''} -> "
                 f"{out / 'index.html'}")
        return 0
