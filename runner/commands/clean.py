"""`matrix clean`: remove the containers and batch jobs interrupted runs left behind."""

from __future__ import annotations

from pathlib import Path

from runner.commands.base import Command, register


@register
class CleanCommand(Command):
    name = "clean"
    help = "Remove containers and batch jobs left by interrupted runs."

    def run(self, run_ref: str | None, db: Path) -> int:
        from runner import backends
        from runner.store import Store
        if run_ref and db.exists():
            with Store(db, readonly=True) as store:
                run_ref = store.resolve_run(run_ref)
        removed = [f"{kind}: {item}" for kind in backends.kinds() for item in backends.get(kind).clean(run_ref)]
        self.say("\n".join(["removed:", *removed]) if removed else "nothing to clean")
        return 0
