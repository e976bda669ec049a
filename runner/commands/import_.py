"""`matrix import`: merge results files into a store, each in one transaction (docs/exchange.md)."""

from __future__ import annotations

from pathlib import Path

from runner.commands.base import Command, register


def import_command(db: Path, files: list[Path]) -> list[str]:
    """Read and check every file first (a damaged one stops everything before the store is opened), then import
    them all in one transaction. Returns one line per file."""
    from runner.store import Store
    from runner.store import exchange as store_exchange
    from runner.store import exchange_file as fmt
    bundles = [(fmt.read(path), str(path)) for path in files]
    lines = []
    with Store(db) as store:
        results = store_exchange.import_bundles(store, bundles)
        for path, (bundle, _), done in zip(files, bundles, results, strict=True):
            source = bundle.header.get("source") or {}
            lines.append(f"{path}: {done.stored} repeats stored, {done.already} already in {db}, {done.runs} runs "
                         f"added (from store {source.get('store', '?')} on {source.get('host', '?')})")
    return lines


@register
class ImportCommand(Command):
    name = "import"
    help = "Merge results files into the store: all or nothing; a repeat already there is not stored again."

    def run(self, files: list[Path], db: Path) -> int:
        self.say("\n".join(import_command(db, files)))
        return 0
