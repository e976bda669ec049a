"""`matrix export`: the selected repeats of a store as one results file (docs/exchange.md)."""

from __future__ import annotations

from pathlib import Path

from runner import __version__
from runner.base.errors import ConfigError, StoreError
from runner.commands.base import Command, register


def export_command(db: Path, out: Path, run_refs: list[str] | None, environments: list[str] | None) -> str:
    """Write the file; returns the line to print (how many repeats and runs, from which store)."""
    import socket

    from runner.store import Store
    from runner.store import exchange as store_exchange
    from runner.store import exchange_file as fmt
    if out.resolve() in {db.resolve(), Path(f"{db}-wal").resolve(), Path(f"{db}-shm").resolve()}:
        raise ConfigError(f"-o {out} is the store itself: pass another file name, e.g. results{fmt.SUFFIX}")
    if out.exists() and out.is_dir():
        raise ConfigError(f"-o {out} is a folder: pass a file name, e.g. {out / ('results' + fmt.SUFFIX)}")
    with Store(db, readonly=True) as store:
        run_ids = [store.resolve_run(r) for r in run_refs] if run_refs else None
        if environments:
            known = store.environments()
            unknown = [e for e in environments if e not in known]
            if unknown:
                raise ConfigError(f"--env {unknown[0]}: no results of that environment in {db}; it has: "
                                  f"{', '.join(known) or '(none)'}")
        source = store_exchange.store_id(store)
        if source is None:
            raise StoreError(f"no runs in {db} yet: nothing to export")
        provenance = {"store": source, "matrix_version": __version__, "exported_by": socket.gethostname()}
        records = list(store_exchange.export_records(store, run_ids, environments, provenance))
    repeats = sum(1 for r in records if r["kind"] == "repeat")
    runs = sum(1 for r in records if r["kind"] == "run")
    header = {"source": {"store": source, "host": socket.gethostname(), "path_name": db.name,
                         "matrix_version": __version__},
              "selection": {"runs": run_ids, "environments": environments},
              "counts": {"runs": runs, "repeats": repeats}}
    fmt.write(out, header, records)
    return f"exported {repeats} repeats of {runs} runs from {db} (store {source}) -> {out}"


@register
class ExportCommand(Command):
    name = "export"
    help = ("Write the selected repeats, with their cells, environments, log tails and provenance, to one portable "
            "file.")

    def run(self, out: Path, db: Path, run_refs: list[str] | None, env: list[str] | None) -> int:
        self.say(export_command(db, out, run_refs or None, env or None))
        return 0
