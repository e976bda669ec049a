"""The store's tables and schema versions: one place for what every part of the store writes."""

from __future__ import annotations

from runner.domain.defaults import DEFAULT_DB as DEFAULT_DB

# The store's schema (meta.schema). 2: the `captures` table and results.capture_id (what an environment is made
# of, kept once per distinct content); a store of schema 1 is migrated when it is first opened for writing,
# and read as it is when opened read-only.
STORE_SCHEMA = 2
# The row schema of `results` and `runs` rows (their `schema` column): unchanged by the captures (a new, nullable
# column), so rows of either store schema read alike.
SCHEMA = 1
CAPTURES_SCHEMA = 1

# captures: what an environment is made of (Python distributions, system packages, the variables that steer
# the libraries, torch's build configuration), one row per distinct content, addressed by its sha256; a
# result refers to its capture by results.capture_id. Append-only, like results.
CAPTURES_DDL = (
    "CREATE TABLE IF NOT EXISTS captures (id TEXT PRIMARY KEY, schema INTEGER NOT NULL, content TEXT NOT NULL, "
    "first_at REAL NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS captures_no_update BEFORE UPDATE ON captures "
    "BEGIN SELECT RAISE(ABORT, 'captures are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS captures_no_delete BEFORE DELETE ON captures "
    "BEGIN SELECT RAISE(ABORT, 'captures are append-only'); END",
)
DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, schema INTEGER NOT NULL, started_at REAL NOT NULL, finished_at REAL,
    matrix_path TEXT, matrix_name TEXT, argv TEXT, host TEXT, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT, schema INTEGER NOT NULL, run_id TEXT NOT NULL,
    cell_key TEXT NOT NULL, repeat INTEGER NOT NULL, environment TEXT NOT NULL, backend TEXT NOT NULL,
    tags TEXT NOT NULL, params TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
    metrics TEXT, env TEXT, raw TEXT, log_tail TEXT, started_at REAL, finished_at REAL, capture_id TEXT);
CREATE INDEX IF NOT EXISTS results_cell ON results (cell_key, repeat);
CREATE INDEX IF NOT EXISTS results_run ON results (run_id);
CREATE TRIGGER IF NOT EXISTS results_no_update BEFORE UPDATE ON results
    BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;
CREATE TRIGGER IF NOT EXISTS results_no_delete BEFORE DELETE ON results
    BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;
CREATE TABLE IF NOT EXISTS batch_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, schema INTEGER NOT NULL, backend TEXT NOT NULL,
    task_key TEXT NOT NULL, task_id TEXT NOT NULL, run_id TEXT NOT NULL, job TEXT NOT NULL,
    idx INTEGER NOT NULL, results_dir TEXT NOT NULL, submitted_at REAL NOT NULL,
    closed_at REAL, closed_how TEXT);
CREATE INDEX IF NOT EXISTS batch_jobs_open ON batch_jobs (backend, closed_at);
CREATE TABLE IF NOT EXISTS holders (
    run_id TEXT PRIMARY KEY, schema INTEGER NOT NULL, host TEXT NOT NULL, ident TEXT NOT NULL,
    pid INTEGER NOT NULL, pid_start TEXT, started_at REAL NOT NULL, heartbeat REAL NOT NULL, ended_at REAL);
CREATE TABLE IF NOT EXISTS claims (
    cell_key TEXT NOT NULL, repeat INTEGER NOT NULL, run_id TEXT NOT NULL, claimed_at REAL NOT NULL,
    machine TEXT, PRIMARY KEY (cell_key, repeat));
CREATE INDEX IF NOT EXISTS claims_run ON claims (run_id);
CREATE TABLE IF NOT EXISTS calibrations (
    cell_key TEXT PRIMARY KEY, schema INTEGER NOT NULL, iterations INTEGER NOT NULL, run_id TEXT NOT NULL,
    repeat INTEGER NOT NULL, iter_s REAL, calibrated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS bisects (
    id INTEGER PRIMARY KEY AUTOINCREMENT, schema INTEGER NOT NULL, started_at REAL NOT NULL,
    finished_at REAL NOT NULL, host TEXT, argv TEXT NOT NULL, metric TEXT NOT NULL, outcome TEXT NOT NULL,
    cell_keys TEXT NOT NULL, answer TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS bisects_no_update BEFORE UPDATE ON bisects
    BEGIN SELECT RAISE(ABORT, 'bisect answers are append-only'); END;
CREATE TRIGGER IF NOT EXISTS bisects_no_delete BEFORE DELETE ON bisects
    BEGIN SELECT RAISE(ABORT, 'bisect answers are append-only'); END;
""" + "".join(f"{statement};\n" for statement in CAPTURES_DDL)
# batch_jobs: tasks handed to a batch scheduler and not yet collected. A submission appends a row;
# collecting it sets closed_at (rows are never deleted). Its own schema, per row: a store written by
# an older matrix gains the table without a migration.
JOBS_SCHEMA = 1
# holders: the process behind each run, with its heartbeat; claims: the repeats a live run is measuring
# (deleted when stored or released). Coordination, not results: a store from before them gains them.
HOLDERS_SCHEMA = 1
# calibrations: the measured iterations the first ok repeat of an `iterations: auto` cell chose; every later repeat
# of that cell runs them (written with that repeat's result, in its transaction; never changed). Its own schema.
CALIBRATIONS_SCHEMA = 1
# bisects: every answer `matrix bisect` gave (its JSON document, as `--format json` prints it, with the cell key of
# each environment it ordered), for the published site. Its own schema, per row: an older store gains the table.
BISECTS_SCHEMA = 1
TABLES = {"meta", "runs", "results"}
# The columns of a `results` row, in the order the store writes them (and the journal keeps them).
COLUMNS = ("schema", "run_id", "cell_key", "repeat", "environment", "backend", "tags", "params", "status",
           "reason", "metrics", "env", "raw", "log_tail", "started_at", "finished_at", "capture_id")
INSERT_RESULT = (f"INSERT INTO results ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})")
JSON_COLUMNS: dict[str, type] = {"tags": list, "params": dict, "metrics": dict, "env": dict, "raw": dict}
