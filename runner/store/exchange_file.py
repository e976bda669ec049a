"""The results file: JSON Lines, gzip-compressed, one record a line (docs/exchange.md).

Line 1 is the header (`kind: header`, `format`, `schema`, the source store and host), then `run`, `capture` and
`repeat` records, and last an `end` record with the number of records before it and the sha256 of their lines:
a file cut short or changed by a flipped bit is refused whole, never half read. Only the standard library is
needed to read it (`zcat FILE | jq`), so another program can take the results without matrix.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
import time
import unicodedata
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base import safewrite
from runner.base.errors import ConfigError, StoreError
from runner.base.safewrite import UnsafePath
from runner.bench.readings import out_of_domain
from runner.domain.outcomes import Status
from runner.record.stored import StoredRepeat

FORMAT = "matrix-results"
SCHEMA = 1
# Schemas this matrix reads, and why the others are refused.
READS = (1,)
SUFFIX = ".jsonl.gz"
# What one results file may hold once decompressed (docs/exchange.md): import reads it as a stream and refuses
# it past these, so a small file that expands without end (a gzip bomb) cannot exhaust the memory.
MAX_LINE_BYTES = 16 * 2**20
MAX_TOTAL_BYTES = 512 * 2**20
MAX_LINES = 2_000_000

# The fields of a repeat whose sha256 is its `digest`: what it measured and how, as the source store kept it.
CONTENT_FIELDS = ("run_id", "cell_key", "repeat", "environment", "backend", "tags", "params", "status", "reason",
                  "metrics", "env", "raw", "log_tail", "started_at", "finished_at", "capture_id")
# A store id as `matrix` makes them (12 hex digits); what an importing store appends to names after an `@`.
STORE_ID = re.compile(r"[A-Za-z0-9_-]{4,64}")
_KINDS = ("header", "run", "capture", "repeat", "end")
_RUN_FIELDS = {"run_id": str, "started_at": (int, float), "status": str}
_REPEAT_TYPES: dict[str, Any] = {"run_id": str, "cell_key": str, "repeat": int, "environment": str,
                                 "backend": str, "tags": list, "params": dict, "status": str, "metrics": dict,
                                 "env": dict, "origin": dict, "digest": str, "provenance": dict}


class DamagedFile(StoreError):
    """A results file that is cut short, changed, or not a results file at all (exit status of the store class:
    the data, not the command line, is wrong)."""


def canonical(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no spaces (digests and the deterministic output rely on it)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True, default=str)


def digest(repeat: dict[str, Any]) -> str:
    """The sha256 of a repeat's content (CONTENT_FIELDS): the same repeat has the same digest in every store."""
    return hashlib.sha256(canonical({k: repeat.get(k) for k in CONTENT_FIELDS}).encode()).hexdigest()


@dataclass
class Bundle:
    """A results file as read: its header, runs, captures (by id) and repeats, in file order."""

    header: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)
    captures: dict[str, str] = field(default_factory=dict)
    repeats: list[dict[str, Any]] = field(default_factory=list)


def write(path: Path, header: dict[str, Any], records: Iterable[dict[str, Any]]) -> int:
    """Write the file (header first, `end` last) through runner/base/safewrite.py: made in a private folder beside it
    and renamed into place, so that a reader never sees half a file and a link planted at `path` is refused, never
    written through. gzip's own time stamp is 0: the same records give the same bytes."""
    sha = hashlib.sha256()
    n = 0
    try:
        with safewrite.replacing(path, mode=0o644) as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            for record in _with_header(header, records):
                line = (canonical(record) + "\n").encode()
                gz.write(line)
                sha.update(line)
                n += 1
            gz.write((canonical({"kind": "end", "records": n, "sha256": sha.hexdigest()}) + "\n").encode())
    except UnsafePath:
        raise
    except OSError as e:
        raise StoreError(f"cannot write {path} ({e.strerror or e}): pass -o with a path in a folder you can write"
                         ) from e
    return n - 1


def _with_header(header: dict[str, Any], records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield {"kind": "header", "format": FORMAT, "schema": SCHEMA, **header}
    yield from records


def read(path: Path) -> Bundle:
    """Read and check a whole file; any damage raises DamagedFile naming the file and the line. The file is
    decompressed as a stream within MAX_LINE_BYTES a line, MAX_TOTAL_BYTES and MAX_LINES in all: a file that
    grows past them (a gzip bomb) is refused before it fills the memory."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder: pass a file `matrix export` wrote")
    try:  # a FIFO or a device is refused (exit 6) without blocking on it
        with safewrite.open_regular(path, "pass a file `matrix export` wrote; nothing was imported") as raw, \
                gzip.GzipFile(fileobj=raw) as stream:
            lines = _bounded_lines(path, stream)
    except UnsafePath:
        raise
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (pass a file `matrix export` wrote)") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        what = "cut short" if isinstance(e, EOFError) else f"not an intact gzip file ({e})"
        raise DamagedFile(f"{path} is damaged: {what}; nothing was imported (export it again)") from None
    except OSError as e:
        raise StoreError(f"cannot read {path} ({e.strerror or e})") from e
    try:
        return parse(path, lines)
    except RecursionError:  # a record nested just within what json reads, too deep to write back
        raise DamagedFile(f"{path} nests a record's JSON deeper than matrix writes or reads back; nothing was "
                          "imported") from None


def _bounded_lines(path: Path, stream: gzip.GzipFile) -> list[bytes]:
    """The decompressed lines, refused past the bounds (module constants, read at call time)."""
    lines: list[bytes] = []
    total = 0
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return lines
        total += len(line)
        if len(line) > MAX_LINE_BYTES:
            raise DamagedFile(f"{path} line {len(lines) + 1} is longer than {MAX_LINE_BYTES:,} bytes decompressed, "
                              "more than any record matrix writes; nothing was imported")
        if total > MAX_TOTAL_BYTES or len(lines) >= MAX_LINES:
            raise DamagedFile(f"{path} decompresses to more than {MAX_TOTAL_BYTES:,} bytes or {MAX_LINES:,} lines, "
                              "the most one results file may hold (docs/exchange.md); nothing was imported (export "
                              "it in parts with --run or --env)")
        lines.append(line)


def parse(path: Path, lines: list[bytes]) -> Bundle:
    """Check the lines of a file (header, records, end) and gather them."""
    if not lines:
        raise DamagedFile(f"{path} is empty: nothing was imported (export it again)")
    header = _record(path, 1, lines[0])
    if header.get("kind") != "header" or header.get("format") != FORMAT:
        raise DamagedFile(f"{path} is not a matrix results file (line 1 is not its header with format {FORMAT!r})")
    _check_schema(path, header.get("schema"))
    _require(path, 1, header, {"source": dict})
    end = _record(path, len(lines), lines[-1])
    sha = hashlib.sha256(b"".join(lines[:-1])).hexdigest()
    if end.get("kind") != "end":
        raise DamagedFile(f"{path} is cut short: it has no end record (its last line is a {end.get('kind')!r} "
                          "record); nothing was imported (export it again)")
    if end.get("records") != len(lines) - 1 or end.get("sha256") != sha:
        raise DamagedFile(f"{path} is damaged: its end record counts {end.get('records')} records with sha256 "
                          f"{str(end.get('sha256'))[:12]}, the file has {len(lines) - 1} with {sha[:12]}; nothing "
                          "was imported (export it again)")
    bundle = Bundle(header)
    runs: set[tuple[str, str]] = set()
    for i, line in enumerate(lines[1:-1], start=2):
        rec = _record(path, i, line)
        kind = rec.get("kind")
        if kind == "run":
            _require(path, i, rec, {**_RUN_FIELDS, "origin": str})
            _names(path, i, rec["origin"], rec["run_id"])
            _timestamps(path, i, rec)
            _printable(path, i, "run field", rec["run_id"], rec.get("matrix_name"), rec.get("host"))
            runs.add((rec["origin"], rec["run_id"]))
            bundle.runs.append(rec)
        elif kind == "capture":
            _require(path, i, rec, {"id": str, "content": str})
            _capture(path, i, rec["id"], rec["content"])
            bundle.captures[rec["id"]] = rec["content"]
        elif kind == "repeat":
            _require(path, i, rec, _REPEAT_TYPES)
            _require(path, i, rec["origin"], {"store": str, "row": int}, "origin.")
            _names(path, i, rec["origin"]["store"], rec["run_id"], rec["cell_key"])
            _readable(path, i, rec)
            if (rec["origin"]["store"], rec["run_id"]) not in runs:
                raise DamagedFile(f"{path} line {i}: repeat of run {rec['run_id']} of store {rec['origin']['store']}, "
                                  "which no run record before it names; nothing was imported")
            if digest(rec) != rec["digest"]:
                raise DamagedFile(f"{path} line {i}: repeat {rec['origin']['store']}:{rec['origin']['row']} does not "
                                  "match its digest (changed after export); nothing was imported")
            bundle.repeats.append(rec)
        else:
            raise DamagedFile(f"{path} line {i}: unknown record kind {kind!r} (known: {', '.join(_KINDS[1:4])})")
    return bundle


def _names(path: Path, number: int, store: str, *names: str) -> None:
    """A store id as matrix makes them, and run ids and cell keys as their own store wrote them (no `@`)."""
    if not STORE_ID.fullmatch(store):
        raise DamagedFile(f"{path} line {number}: store id {store[:80]!r} is not one matrix makes (4 to 64 letters, "
                          "digits, _ or -); nothing was imported")
    for name in names:
        if "@" in name or not name:
            raise DamagedFile(f"{path} line {number}: {name[:80]!r} is not a run id or cell key as a store writes "
                              "it (empty, or with an @); nothing was imported")


_STATUSES = tuple(s.value for s in Status)
_OPTIONAL: dict[str, Any] = {"reason": str, "log_tail": str, "capture_id": str, "raw": dict, "started_at": (int, float),
             "finished_at": (int, float)}
_INT_PARAMS = ("batch_size", "gpus", "nodes")
# A clock ahead of this one by up to a day is a host's clock; a time further on (or NaN) would make the imported
# run the store's `latest` for every later command, ahead of every run measured here.
FUTURE_SLACK_S = 86400.0
_ROW_MAX = 2**63 - 1  # SQLite's INTEGER


def _timestamps(path: Path, number: int, rec: dict[str, Any]) -> None:
    latest = time.time() + FUTURE_SLACK_S
    for name in ("started_at", "finished_at"):
        value = rec.get(name)
        if value is not None and not (math.isfinite(value) and 0 <= value <= latest):
            raise DamagedFile(f"{path} line {number}: {name} {value!r} is not a time up to a day ahead of this "
                              "host's clock (a run from the future would be every later command's latest run); "
                              "nothing was imported")


def _printable(path: Path, number: int, field_name: str, *texts: Any) -> None:
    """Names as a matrix.yaml may spell them (runner/domain/cells.py): one line each, no control character, not blank."""
    for text in texts:
        if text is None:
            continue
        if not isinstance(text, str) or not text.strip() or any(unicodedata.category(c) == "Cc" for c in text):
            raise DamagedFile(f"{path} line {number}: {field_name} {str(text)[:80]!r} is blank or holds a control "
                              "character (a tab, newline or terminal escape), which no matrix.yaml name may; "
                              "nothing was imported")


def _readable(path: Path, number: int, rec: dict[str, Any]) -> None:
    """A repeat this matrix can read back from a store as it reads its own: a known status, the optional fields of
    their types, the params the tables count with as whole numbers. A store holding anything else would make
    every later command on it fail."""
    if rec["status"] not in _STATUSES:
        raise DamagedFile(f"{path} line {number}: status {rec['status'][:40]!r} is not one this matrix knows "
                          f"({', '.join(_STATUSES)}): it was written by a newer matrix; upgrade matrix to import it")
    for name, kind in _OPTIONAL.items():
        value = rec.get(name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise DamagedFile(f"{path} line {number}: field {name} is a {type(value).__name__}; nothing was imported")
    if not 0 <= rec["repeat"] <= _ROW_MAX or not 0 <= rec["origin"]["row"] <= _ROW_MAX:
        raise DamagedFile(f"{path} line {number}: repeat {rec['repeat']} or row {rec['origin']['row']} is not a "
                          "whole number a store keeps (0 up to 2**63 - 1); nothing was imported")
    _timestamps(path, number, rec)
    _printable(path, number, "name", rec["run_id"], rec["cell_key"], rec["environment"], rec["backend"], *rec["tags"])
    wrong = out_of_domain(rec["metrics"], {}) if rec["status"] == "ok" else None
    if wrong:
        raise DamagedFile(f"{path} line {number}: an ok repeat whose metric {wrong}; nothing was imported")
    for name in _INT_PARAMS:
        value = rec["params"].get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise DamagedFile(f"{path} line {number}: params.{name} is {value!r:.40}, not a whole number; nothing "
                              "was imported")
    # Admission's bounds last, on the record as the repeat it would be stored as (runner/record/admission.py).
    beyond = StoredRepeat.of(rec).unreachable if rec["status"] in ("ok", "diverged") else ""
    if beyond:
        raise DamagedFile(f"{path} line {number}: a repeat whose {beyond} (docs/admission.md); nothing was "
                          "imported")


def _capture(path: Path, number: int, cid: str, content: str) -> None:
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    if not isinstance(value, dict) or hashlib.sha256(content.encode()).hexdigest() != cid:
        raise DamagedFile(f"{path} line {number}: capture {cid[:12]!r} is not a JSON object whose sha256 is its id; "
                          "nothing was imported")


def _check_schema(path: Path, schema: Any) -> None:
    if schema in READS:
        return
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > max(READS):
        raise StoreError(f"{path} has results schema {schema}; this matrix reads schema "
                         f"{', '.join(map(str, READS))}: it was written by a newer matrix; upgrade matrix to import it")
    raise StoreError(f"{path} has results schema {schema!r}; this matrix reads schema {', '.join(map(str, READS))}: "
                     "export it again with this matrix, or import it with the matrix that wrote it")


def _record(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise DamagedFile(f"{path} line {number} is not JSON (the file is damaged or cut short); nothing was "
                          "imported") from None
    except RecursionError:
        raise DamagedFile(f"{path} line {number} nests its JSON deeper than Python reads, more than any record "
                          "matrix writes; nothing was imported") from None
    if not isinstance(rec, dict):
        raise DamagedFile(f"{path} line {number} is a JSON {type(rec).__name__}, not a record; nothing was imported")
    return rec


def _require(path: Path, number: int, rec: dict[str, Any], fields: dict[str, Any], prefix: str = "") -> None:
    for name, kind in fields.items():
        value = rec.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            shown = "missing" if name not in rec else f"a {type(value).__name__}"
            want = " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
            raise DamagedFile(f"{path} line {number}: field {prefix}{name} is {shown}, not a {want}; nothing was "
                              "imported")
