"""The kit's outputs besides its store: the report folder (named after the state's device) and the pack (the
state and the report in one file) that the next call, on a fresh machine, resumes from.

The pack is written after every repeat and before the report, so that neither a call killed at its limit nor a
report that fails loses what was measured; the report's failure is one line."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from runner.base import safewrite
from runner.kit import device
from runner.kit.settings import KitView

PACK_SKIP = ("cache",)     # generated data: made again where it is missing
# torch.compile's caches (inductor's FX graphs and Triton's kernels, runner/kit/evidence.py points them here): carried
# to the next machine when the pack stays under what a call returns (16 MiB a file), so a later call does not
# compile again; left out, and said, when they would not fit.
COMPILE_CACHE = "compile-cache"
PACK_MAX = 15 * 2**20


def out_dir(kit: KitView) -> Path:
    """reports/<the state's device> unless --out says otherwise."""
    if kit.args.out is not None:
        return Path(kit.args.out)
    return Path("reports") / device.slug(kit.device)


def report(kit: KitView) -> bool:
    """The evidence page and `matrix report` of the store; a failure (a missing report dependency, a bug) is one
    line, and what was measured stays stored and packed. False when no report was written."""
    out = out_dir(kit)
    if not kit.db.exists():
        kit.say("no repeat stored yet: no report")
        return False
    try:
        from runner.kit import evidence_page
        files = evidence_page.write(kit, out)
    except Exception as e:
        kit.say(f"report: not written ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}); every "
                "measured repeat is stored and packed: write it later with --report-only")
        return False
    kit.say(f"report: {out} ({len(files)} files)")
    return True


def pack(kit: KitView, quiet: bool = False) -> None:
    """The state (without generated data) and the report folder as one .tar.gz, paths relative to the working
    directory; written beside and renamed over, so a kill mid-way leaves the last whole pack."""
    if kit.args.pack is None:
        return
    if kit.db.exists():  # the store in one file: its write-ahead log folded in
        from runner.store.db import checkpoint
        checkpoint(kit.db)
    target = Path(kit.args.pack)
    target.parent.mkdir(parents=True, exist_ok=True)
    caches = (kit.state / COMPILE_CACHE).exists()
    data = _pack_bytes(kit, target, caches)
    if caches and len(data) > PACK_MAX:
        data = _pack_bytes(kit, target, False)
        if not quiet:
            kit.say(f"torch.compile's caches left out of the pack: with them it would pass {PACK_MAX / 2**20:.0f} MiB; "
                    "the next machine compiles again")
        caches = False
    with safewrite.replacing(target, mode=0o644) as raw:
        raw.write(data)
    if not quiet:
        kit.say(f"packed the state and the report: {target} ({len(data) / 2**20:.2f} MiB"
                f"{', torch.compile caches included' if caches else ''}); unpack it in the checkout's root to "
                "continue from it")


def _pack_bytes(kit: KitView, target: Path, caches: bool) -> bytes:
    """The pack's bytes: the state (without generated data; with torch.compile's caches when `caches`) and the
    report folder, paths relative to the working directory."""
    out = out_dir(kit)
    skip = PACK_SKIP if caches else (*PACK_SKIP, COMPILE_CACHE)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=3) as tar:
        for folder in (kit.state, out):
            if not folder.exists():
                continue
            for path in sorted(folder.rglob("*")):
                rel = path.relative_to(kit.state) if folder == kit.state else None
                if rel is not None and rel.parts and rel.parts[0] in skip:
                    continue
                if path.resolve() == target.resolve() or any(p.startswith(safewrite.PRIVATE_PREFIX) for p in path.parts):
                    continue  # a pack written inside the state never packs itself (nor a write under way)
                if path.is_file() and not path.is_symlink() and not path.name.endswith(("-shm", "-wal", ".tmp")):
                    tar.add(path, arcname=kit.rel(path), recursive=False)
    return buffer.getvalue()
