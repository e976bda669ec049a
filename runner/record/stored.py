"""A stored repeat as a typed record (as pyperf's `Run`): its columns, its provenance (the store that measured it and,
for an imported one, the file it came in) and its admission, built once where the store's row is read
(runner/store/results.py `Store.rows()`). Everything above the store takes it; a plain mapping becomes one only
through `StoredRepeat.of` (tests' fixtures, an import's checks of a file's records)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from runner.record.admission import Admission, admit
from runner.record.metrics import figures

if TYPE_CHECKING:
    from runner.domain.cells import Task
    from runner.domain.outcomes import Outcome


class Document(dict[str, Any]):
    """A JSON object a repeat stores (its params, metrics, env, raw result), read-only: a repeat is what was measured,
    and no reader changes it for the next one. `dict(doc)` is a copy to change."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a stored repeat's document is read-only; copy it with dict(...) to change it")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Document, (dict(self),))


EMPTY = Document()


def document(value: Any) -> Document:
    """A stored JSON object as a Document ({} for anything that is not one)."""
    kind = type(value)
    if kind is Document:
        return value
    if kind is dict:  # the store's decoded JSON: the common case
        return Document(value) if value else EMPTY
    return Document(value) if isinstance(value, Mapping) and value else EMPTY


def origin_of(name: str) -> str:
    """The store a run id or cell key came from: `<name>@<store id>` for an imported one, "" for this store's own."""
    return name.rpartition("@")[2] if "@" in name else ""


@dataclass(frozen=True)
class Origin:
    """Where a repeat was measured: the store (its id, "" for this store) and, for an imported repeat, its row there,
    the file `matrix import` was given and when (the `imported` table; runner/store/exchange.py)."""

    store: str = ""
    row: int | None = None
    source: str = ""
    imported_at: float | None = None

    @property
    def imported(self) -> bool:
        return bool(self.store)


HERE = Origin()


@dataclass(frozen=True)
class StoredRepeat:
    """One row of the store's `results` table: what one repeat of one cell produced, as it was stored."""

    id: int
    run_id: str
    cell_key: str
    repeat: int
    environment: str
    backend: str
    tags: tuple[str, ...]
    params: Mapping[str, Any]
    status: str                        # as stored; `admission.status` is what the decision core sees
    reason: str
    metrics: Mapping[str, Any]
    env: Mapping[str, Any]
    raw: Mapping[str, Any] | None      # the benchmark's (or launcher's) result; None when the repeat produced none
    log_tail: str
    started_at: float | None
    finished_at: float | None
    capture_id: str | None = None
    origin: Origin = HERE

    @classmethod
    def of(cls, row: Mapping[str, Any], position: int = 0, origin: Origin | None = None) -> StoredRepeat:
        """A repeat from a mapping of the store's columns (JSON decoded), missing ones empty: for tests' fixtures and
        for an import's checks of a file's records. `position`: its id when the mapping has none."""
        run_id = str(row.get("run_id") or "")
        raw = row.get("raw")
        found = row.get("id")
        return cls(int(found) if isinstance(found, int | float) else position, run_id, str(row.get("cell_key") or ""),
                   int(row.get("repeat") or 0), str(row.get("environment") or ""), str(row.get("backend") or ""),
                   tuple(str(t) for t in row.get("tags") or ()), document(row.get("params")),
                   str(row.get("status") or ""), str(row.get("reason") or ""), document(row.get("metrics")),
                   document(row.get("env")), document(raw) if isinstance(raw, Mapping) else None,
                   str(row.get("log_tail") or ""), _time(row.get("started_at")), _time(row.get("finished_at")),
                   _text(row.get("capture_id")), origin or (Origin(origin_of(run_id)) if "@" in run_id else HERE))

    @classmethod
    def many(cls, rows: Iterable[Mapping[str, Any]]) -> list[StoredRepeat]:
        """`of` for each mapping, numbered by position where it has no id (a test's fixture)."""
        return [cls.of(r, i) for i, r in enumerate(rows)]

    @classmethod
    def measured(cls, task: Task, outcome: Outcome, run_id: str = "") -> StoredRepeat:
        """The repeat a task's outcome will be stored as (before it is: the printer judges it as it ends)."""
        cell = task.cell
        raw = outcome.result
        return cls(0, run_id, cell.key, task.repeat, cell.env_name, cell.environment.backend,
                   tuple(cell.environment.tags), document(dict(cell.params)), outcome.status.value, outcome.reason,
                   document(outcome.metrics), document(outcome.env), document(raw) if raw is not None else None,
                   outcome.log_tail, outcome.started_at, outcome.finished_at)

    @property
    def seq(self) -> int:
        """Its place in the order of the store that measured it (its id there): a re-run's newer row supersedes an
        older one of the same repeat by this order, not by when an import brought either here."""
        return self.origin.row if self.origin.imported and self.origin.row is not None else self.id

    def columns(self) -> dict[str, Any]:
        """Its columns as the store keeps them (JSON decoded; copies a caller may change): for a file format, or a
        test that asserts on what was stored."""
        return {"id": self.id, "run_id": self.run_id, "cell_key": self.cell_key, "repeat": self.repeat,
                "environment": self.environment, "backend": self.backend, "tags": list(self.tags),
                "params": dict(self.params), "status": self.status, "reason": self.reason, "metrics": dict(self.metrics),
                "env": dict(self.env), "raw": dict(self.raw) if self.raw is not None else None,
                "log_tail": self.log_tail, "started_at": self.started_at, "finished_at": self.finished_at,
                "capture_id": self.capture_id}

    @property
    def imported(self) -> bool:
        """Measured by another store and imported here (its run id and cell key carry that store's id)."""
        return self.origin.imported

    # Made once per repeat and kept in the instance's __dict__ (functools.cached_property takes a lock on every first
    # read in this Python: a tenth of the frame's time on a 10,000-repeat store).
    @property
    def figures(self) -> dict[str, float]:
        """One figure per metric of the table (runner/record/metrics.py), in stored units (NaN: not measured)."""
        made: dict[str, float] | None = self.__dict__.get("_figures")
        if made is None:
            made = self.__dict__["_figures"] = figures(self.metrics, self.raw)
        return made

    @property
    def admission(self) -> Admission:
        """What admission decides for it (runner/record/admission.py): a stored ok may be diverged or refused."""
        made: Admission | None = self.__dict__.get("_admission")
        if made is None:
            made = self.__dict__["_admission"] = admit(self.status, self.metrics, self.raw, self.figures)
        return made

    @property
    def unreachable(self) -> str:
        """Why its figures are none a machine produces (admission's bounds check failed), '' when they are: an import
        refuses a file that holds one (a figure of 1.7e308 img/s would overflow every mean and ratio built on it)."""
        return next((c.detail for c in self.admission.checks if c.name == "bounds" and c.passed is False), "")


def admission_of(status: str, metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> Admission:
    """Admission from a repeat's stored status and documents, for a reader that reads columns rather than repeats (the
    site reads one figure a row from 100,000 of them)."""
    return admit(status, metrics, raw, figures(metrics, raw))


def _time(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return str(value) if value is not None else None
