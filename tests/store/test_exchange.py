"""`matrix export` and `matrix import`: a portable file, an idempotent all-or-nothing import, machines that never
collide, damaged and foreign files refused with the store unchanged."""

from __future__ import annotations

import gzip
import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from runner.base.errors import StoreError
from runner.commands.export import export_command
from runner.commands.import_ import import_command
from runner.store import exchange_file as fmt
from tests.store.synthetic import fill_history


def cli(matrix_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*matrix_cmd, *args], capture_output=True, text=True, timeout=120, check=False)


def fingerprint(db: Path) -> str:
    """Every row of every table: equal fingerprints, an unchanged store."""
    con = sqlite3.connect(db)
    try:
        text = "\n".join(repr(row) for table in ("meta", "runs", "results", "captures")
                         for row in con.execute(f"SELECT * FROM {table} ORDER BY 1"))
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "imported" in tables:
            text += "\n".join(repr(r) for r in con.execute("SELECT * FROM imported ORDER BY 1"))
    finally:
        con.close()
    return hashlib.sha256(text.encode()).hexdigest()


def count(db: Path, sql: str = "SELECT COUNT(*) FROM results") -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    """Two machines' files whose run ids, cell keys and repeat numbers are all the same (the same seed): only
    the stores they came from tell them apart."""
    a = fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=3, repeats=3, cells=4, seed=7)
    b = fill_history(tmp_path / "b.db", "beta", "Intel Xeon", runs=3, repeats=3, cells=4, seed=7,
                     first_run=1.7e9 + 5, step_at=0, step=1.3)
    export_command(a, tmp_path / "a.jsonl.gz", None, None)
    export_command(b, tmp_path / "b.jsonl.gz", None, None)
    return tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"


def test_the_file_is_gzip_json_lines_with_a_header_and_an_end(two: tuple[Path, Path]) -> None:
    lines = gzip.decompress(two[0].read_bytes()).decode().splitlines()
    header, end = json.loads(lines[0]), json.loads(lines[-1])
    assert header["format"] == "matrix-results" and header["schema"] == fmt.SCHEMA
    assert header["counts"] == {"runs": 3, "repeats": 36}
    assert end == {"kind": "end", "records": len(lines) - 1,
                   "sha256": hashlib.sha256("".join(x + "\n" for x in lines[:-1]).encode()).hexdigest()}
    repeat = next(json.loads(x) for x in lines if '"kind":"repeat"' in x)
    assert repeat["params"]["model"] == "resnet50" and repeat["log_tail"].startswith("log of resnet50")
    assert repeat["env"]["hostname"] == "alpha" and repeat["provenance"]["hardware"] == "AMD EPYC (2 CPUs)"
    assert repeat["provenance"]["matrix_version"] and repeat["origin"]["store"] == header["source"]["store"]


def test_export_is_deterministic(two: tuple[Path, Path], tmp_path: Path) -> None:
    export_command(tmp_path / "a.db", tmp_path / "again.jsonl.gz", None, None)
    assert (tmp_path / "again.jsonl.gz").read_bytes() == two[0].read_bytes()


def test_export_selects_runs_and_environments(two: tuple[Path, Path], tmp_path: Path) -> None:
    run = json.loads(gzip.decompress(two[0].read_bytes()).splitlines()[1])["run_id"]
    export_command(tmp_path / "a.db", tmp_path / "one.jsonl.gz", [run[:10]], None)
    assert fmt.read(tmp_path / "one.jsonl.gz").header["counts"] == {"runs": 1, "repeats": 12}
    with pytest.raises(Exception, match="no results of that environment"):
        export_command(tmp_path / "a.db", tmp_path / "x.jsonl.gz", None, ["nope"])


def test_import_twice_stores_nothing_new_and_machines_never_collide(two: tuple[Path, Path], tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    first = import_command(db, list(two))
    assert "36 repeats stored, 0 already" in first[0] and "36 repeats stored, 0 already" in first[1]
    before = fingerprint(db)
    again = import_command(db, [two[1], two[0]])
    assert all("0 repeats stored, 36 already" in line for line in again)
    assert fingerprint(db) == before and count(db) == 72
    assert count(db, "SELECT COUNT(DISTINCT run_id) FROM results") == 6     # the same run ids, two machines
    assert count(db, "SELECT COUNT(DISTINCT cell_key || '/' || repeat) FROM results") == 24


def test_a_chain_of_stores_keeps_the_origin(two: tuple[Path, Path], tmp_path: Path) -> None:
    import_command(tmp_path / "c.db", list(two))
    export_command(tmp_path / "c.db", tmp_path / "c.jsonl.gz", None, None)
    back = import_command(tmp_path / "a.db", [tmp_path / "c.jsonl.gz"])    # a's own repeats come home: no copy
    assert "36 repeats stored, 36 already" in back[0]
    assert "72 repeats stored" in import_command(tmp_path / "d.db", [tmp_path / "c.jsonl.gz"])[0]
    assert all("0 repeats stored, 36 already" in line for line in import_command(tmp_path / "d.db", list(two)))
    assert count(tmp_path / "d.db") == 72


@pytest.mark.parametrize("damage", ["truncated", "gzip bit", "content bit", "no end", "empty"])
def test_a_damaged_file_changes_nothing(two: tuple[Path, Path], tmp_path: Path, matrix_cmd: list[str],
                                        damage: str) -> None:
    db = tmp_path / "c.db"
    import_command(db, [two[1]])
    before = fingerprint(db)
    data = two[0].read_bytes()
    bad = tmp_path / "bad.jsonl.gz"
    if damage == "truncated":
        bad.write_bytes(data[: len(data) * 2 // 3])
    elif damage == "gzip bit":
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x04
        bad.write_bytes(bytes(flipped))
    elif damage == "content bit":   # a valid gzip of a changed record: the digest and the end record tell
        text = bytearray(gzip.decompress(data))
        at = text.index(b'"throughput":') + len(b'"throughput":') + 2
        text[at] = ord("7") if text[at] != ord("7") else ord("3")
        bad.write_bytes(gzip.compress(bytes(text)))
    elif damage == "no end":
        bad.write_bytes(gzip.compress(b"".join(gzip.decompress(data).splitlines(keepends=True)[:-1])))
    else:
        bad.write_bytes(b"")
    proc = cli(matrix_cmd, "import", str(two[0]), str(bad), "--db", str(db))
    assert proc.returncode == 6, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr and "nothing was imported" in proc.stderr
    assert fingerprint(db) == before          # the good file named first was not imported either


def rewrite(src: Path, dst: Path, change: dict[str, object] | None = None, schema: object = None) -> None:
    """The file again with its header's schema or a repeat changed, digests and end record made to match."""
    lines = [json.loads(x) for x in gzip.decompress(src.read_bytes()).splitlines()[:-1]]
    header = {k: v for k, v in lines[0].items() if k not in ("kind", "format", "schema")}
    records = lines[1:]
    if change:
        rep = next(r for r in records if r["kind"] == "repeat")
        rep.update(change)
        rep["digest"] = fmt.digest(rep)
    fmt.write(dst, header, records)
    if schema is not None:
        text = gzip.decompress(dst.read_bytes()).splitlines(keepends=True)
        text[0] = text[0].replace(b'"schema":1', f'"schema":{json.dumps(schema)}'.encode())
        end = {"kind": "end", "records": len(text) - 1, "sha256": hashlib.sha256(b"".join(text[:-1])).hexdigest()}
        dst.write_bytes(gzip.compress(b"".join(text[:-1]) + fmt.canonical(end).encode() + b"\n"))


def test_a_repeat_that_exists_with_other_content_is_refused(two: tuple[Path, Path], tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    import_command(db, [two[0]])
    before = fingerprint(db)
    rewrite(two[0], tmp_path / "forged.jsonl.gz", {"status": "failed", "reason": "overwritten?"})
    with pytest.raises(StoreError, match="already in .* with other content .* never overwritten"):
        import_command(db, [two[1], tmp_path / "forged.jsonl.gz"])
    assert fingerprint(db) == before


@pytest.mark.parametrize(("schema", "words"), [(2, "newer matrix; upgrade matrix"), ("1", "schema '1'"),
                                               (0, "schema 0")])
def test_another_schema_is_refused_with_the_reason(two: tuple[Path, Path], tmp_path: Path, schema: object,
                                                    words: str) -> None:
    other = tmp_path / "other.jsonl.gz"
    rewrite(two[0], other, schema=schema)
    with pytest.raises(StoreError, match=words):
        import_command(tmp_path / "c.db", [other])
    assert not (tmp_path / "c.db").exists()


def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"kind": "header", "format": "asv"}\n'))
    with pytest.raises(StoreError, match="not a matrix results file"):
        fmt.read(path)
    path.write_bytes(b"plain text")
    with pytest.raises(StoreError, match="not an intact gzip file"):
        fmt.read(path)


@pytest.mark.parametrize(("field", "value", "words"), [
    ("origin", {"store": "../../x", "row": 1}, "store id '../../x' is not one matrix makes"),
    ("run_id", "r@evil", "is not a run id or cell key"),
    ("cell_key", "", "is not a run id or cell key"),
    ("origin", {"store": "abcdef", "row": True}, "field origin.row is a bool, not a int"),
])
def test_hostile_names_are_refused(two: tuple[Path, Path], tmp_path: Path, field: str, value: object,
                                   words: str) -> None:
    bad = tmp_path / "bad.jsonl.gz"
    rewrite(two[0], bad, {field: value})
    with pytest.raises(StoreError, match=words):
        fmt.read(bad)


def test_a_repeat_of_a_run_the_file_does_not_name_is_refused(two: tuple[Path, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl.gz"
    rewrite(two[0], bad, {"origin": {"store": "abcdef123456", "row": 1}})
    with pytest.raises(StoreError, match="which no run record before it names"):
        fmt.read(bad)


def test_export_never_overwrites_the_store(two: tuple[Path, Path], tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    before = fingerprint(db)
    with pytest.raises(Exception, match="is the store itself"):
        export_command(db, db, None, None)
    assert fingerprint(db) == before


@pytest.mark.parametrize(("change", "words"), [
    ({"status": "exploded"}, "status 'exploded' is not one this matrix knows"),
    ({"params": {"model": "wrn", "batch_size": "32; DROP"}}, "params.batch_size is '32; DROP'"),
    ({"raw": [1, 2]}, "field raw is a list"),
    ({"log_tail": 7}, "field log_tail is a int"),
])
def test_a_repeat_no_command_could_read_back_is_refused(two: tuple[Path, Path], tmp_path: Path,
                                                        change: dict[str, object], words: str) -> None:
    bad = tmp_path / "bad.jsonl.gz"
    rewrite(two[0], bad, change)
    with pytest.raises(StoreError, match=words):
        fmt.read(bad)


def test_a_capture_must_be_the_object_its_id_says(two: tuple[Path, Path], tmp_path: Path) -> None:
    header = {"source": {"store": "abcdef123456"}}
    fmt.write(tmp_path / "c.jsonl.gz", header, [{"kind": "capture", "id": "0" * 64, "content": "{}"}])
    with pytest.raises(StoreError, match="is not a JSON object whose sha256 is its id"):
        fmt.read(tmp_path / "c.jsonl.gz")


def test_a_run_here_never_takes_another_machines_repeats_for_its_own(two: tuple[Path, Path], tmp_path: Path) -> None:
    """`matrix run` asks the store which repeats of its cells are stored (Store.latest_statuses by cell key): an
    imported repeat is under its origin's namespace, so this machine still measures its own."""
    from runner.store import Store

    lines = gzip.decompress(two[0].read_bytes()).splitlines()
    origin = json.loads(lines[0])["source"]["store"]
    keys = {json.loads(x)["cell_key"] for x in lines if b'"kind":"repeat"' in x}
    import_command(tmp_path / "c.db", [two[0]])
    with Store(tmp_path / "c.db", readonly=True) as store:
        assert store.latest_statuses(keys) == {}
        assert len(store.latest_statuses({f"{k}@{origin}" for k in keys})) == 12     # 4 cells x 3 repeats


@pytest.mark.parametrize("bound, value", [("MAX_TOTAL_BYTES", 4096), ("MAX_LINE_BYTES", 1024), ("MAX_LINES", 3)])
def test_a_file_that_expands_past_the_bounds_is_refused(two: tuple[Path, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, bound: str,
                                                         value: int) -> None:
    """A small file that decompresses past a bound (a gzip bomb, here a few hundred bytes that expand to a
    megabyte) is refused in one line, the store unchanged, before the whole of it is read."""
    db = tmp_path / "c.db"
    import_command(db, [two[1]])
    before = fingerprint(db)
    bomb = tmp_path / "bomb.jsonl.gz"
    head = gzip.decompress(two[0].read_bytes()).splitlines(keepends=True)[0]
    bomb.write_bytes(gzip.compress(head + b"\n" * 10 + b" " * 2**20 + b"\n", 9))
    assert bomb.stat().st_size < 4096 and sum(len(x) for x in [head]) < 4096
    monkeypatch.setattr(fmt, bound, value)
    with pytest.raises(fmt.DamagedFile, match=f"{bomb}.*(longer than|more than).*nothing was imported") as e:
        import_command(db, [bomb])
    assert "\n" not in str(e.value)
    assert fingerprint(db) == before


def test_a_gzip_bomb_is_refused_by_the_cli_with_the_store_status(tmp_path: Path, matrix_cmd: list[str]) -> None:
    """With the real bounds: one line of 17 MiB (under 20 KB compressed) is refused, exit status 6."""
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"{" + b" " * (17 * 2**20) + b"}\n", 9))
    assert bomb.stat().st_size < 50_000
    proc = cli(matrix_cmd, "import", str(bomb), "--db", str(tmp_path / "c.db"))
    assert proc.returncode == 6, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "longer than 16,777,216 bytes" in proc.stderr
    assert not (tmp_path / "c.db").exists() or count(tmp_path / "c.db") == 0


def test_a_record_nested_without_end_is_refused_in_one_line(tmp_path: Path, matrix_cmd: list[str]) -> None:
    """JSON nested deeper than Python's recursion limit (a few hundred bytes compressed) is a damaged file,
    exit 6 in one line, never an internal error."""
    deep = tmp_path / "deep.jsonl.gz"
    deep.write_bytes(gzip.compress(b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}\n", 9))
    proc = cli(matrix_cmd, "import", str(deep), "--db", str(tmp_path / "c.db"))
    assert proc.returncode == 6, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "nests its JSON deeper" in proc.stderr


def test_latest_is_the_newest_run_measured_here_not_a_later_import(two: tuple[Path, Path], tmp_path: Path) -> None:
    """Another machine's run that started later (its clock, its day) became `matrix show`'s latest run: show and
    every `latest` answered about that machine's repeats. Latest is the newest run of this store; a store of
    imports only has the newest import as its latest."""
    from runner.store import Store
    from tests.store.synthetic import fill_history

    here = fill_history(tmp_path / "here.db", "gamma", "AMD EPYC", runs=1, repeats=1, cells=1, seed=3,
                        first_run=1.0e9)  # measured long before the imported runs started
    import_command(here, [two[1]])
    with Store(here, readonly=True) as store:
        ids = [r.run_id for r in store.runs()]
        assert "@" in ids[-1]  # the import sorts last
        assert store.resolve_run(None) == store.resolve_run("latest") == ids[0] and "@" not in ids[0]
    import_command(tmp_path / "only.db", [two[1]])
    with Store(tmp_path / "only.db", readonly=True) as store:
        assert store.resolve_run("latest") == store.runs()[-1].run_id
