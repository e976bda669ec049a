"""The result store: SQLite, append-only, one row per repeat (docs/internals.md, "Store").

Several `matrix run` processes may use one store at once: each repeat is claimed in the store before it is
measured, and a claim dies with its holder (docs/internals.md, "Concurrent runs"). A result the store
cannot take (a full disk) is kept in a journal beside it and imported by the next writer.

One `Store`, built of one part per concern, each on the parts below it:
  db.py (open, transactions, errors) -> captures.py, calibrations.py -> journaled.py (the journal's import)
  -> holders.py (live or reaped) -> runs.py -> claims.py -> results.py -> runclaims.py (a run's side of the claim
  protocol: `begin_run` and its verbs, all the run loop calls); jobs.py (batch jobs) and bisects.py (the answers
  `matrix bisect` gave) beside them; lean.py (whole stores read lean, for the published site).
"""

from __future__ import annotations

from runner.store.bisects import Bisects
from runner.store.captures import Capture, split_capture
from runner.store.claims import Claim
from runner.store.db import StoreFull
from runner.store.jobs import BatchJob, BatchJobs
from runner.store.lean import Lean, LeanRow
from runner.store.liveness import HEARTBEAT_S, LEASE_S, MACHINE, Holder, Process, this_process
from runner.store.runclaims import ClaimProtocol, RunClaims, Taken
from runner.store.runs import RunInfo, new_run_id, run_status
from runner.store.schema import COLUMNS as _COLUMNS
from runner.store.schema import DEFAULT_DB, JSON_COLUMNS, SCHEMA, STORE_SCHEMA


class Store(ClaimProtocol, BatchJobs, Bisects, Lean):
    """Opens (and creates) the database; every write is its own short transaction (BEGIN IMMEDIATE)."""


__all__ = ["DEFAULT_DB", "HEARTBEAT_S", "JSON_COLUMNS", "LEASE_S", "MACHINE", "SCHEMA", "STORE_SCHEMA", "_COLUMNS",
           "BatchJob", "BatchJobs", "Capture", "Claim", "Holder", "LeanRow", "Process", "RunClaims", "RunInfo", "Store",
           "StoreFull", "Taken", "new_run_id", "run_status", "split_capture", "this_process"]
