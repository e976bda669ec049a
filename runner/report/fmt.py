"""Number formatting and Markdown escaping: how a computed number becomes text, in one place."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from runner.analysis import Metric
from runner.base.table import Table as Table
from runner.base.table import TableCell as TableCell  # re-exported: the report's modules import it from here

DASH = "—"


def _isnan(x: Any) -> bool:
    try:
        return x is None or math.isnan(float(x))
    except (TypeError, ValueError):
        return True


def decimals(mean: float, std: float | None = None) -> int:
    """Decimals that show the std to two significant digits, or the mean to four without a std."""
    if std is not None and not _isnan(std) and std > 0:
        return max(0, min(6, 1 - math.floor(math.log10(std))))
    if _isnan(mean) or mean == 0:
        return 0 if not _isnan(mean) else 2
    return max(0, min(6, 3 - math.floor(math.log10(abs(mean)))))


def number(x: Any, places: int | None = None) -> str:
    """A number for a table: '—' for missing, else fixed decimals (chosen from the value if not given)."""
    if _isnan(x):
        return DASH
    x = float(x)
    return f"{x:.{decimals(x) if places is None else places}f}"


def mean_std(mean: Any, std: Any, n: int, scale: float = 1.0) -> str:
    """'mean ± std'; a single repeat is 'mean (n=1)', never 'nan'; no data is '—'."""
    if n == 0 or _isnan(mean):
        return DASH
    m = float(mean) * scale
    if n < 2 or _isnan(std):
        return f"{number(m)} (n=1)" if n == 1 else number(m)
    s = float(std) * scale
    places = decimals(m, s)
    return f"{m:.{places}f} ± {s:.{places}f}"


def metric_value(m: Metric, mean: Any, std: Any, n: int) -> str:
    return mean_std(mean, std, n, m.scale)


def ratio(x: Any) -> str:
    """'1.85x' for a ratio; '—' when there is none."""
    return DASH if _isnan(x) else f"{float(x):.2f}x"


def ratio_words(x: Any, words: str | None) -> str:
    """'0.96x (1.04x slower)', or just the words when they start with the same number."""
    number = ratio(x)
    if not words:
        return number
    return words if words.startswith(number) else f"{number} ({words})"


def percent(x: Any) -> str:
    return DASH if _isnan(x) else f"{float(x) * 100:.0f}%"


def p_value(p: Any) -> str:
    if _isnan(p):
        return DASH
    return "<0.001" if float(p) < 0.001 else f"{float(p):.3f}"


def iso8601(ts: Any) -> str | None:
    """A stored epoch time as ISO 8601 in UTC ('2026-11-23T18:28:05Z') for CSV and JSON; None for none."""
    import time

    try:
        t = float(ts)
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if math.isfinite(t) else None
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def short_digest(value: str, keep: int = 12) -> str:
    """'repo@sha256:5f0c1b2a3d4e…' → the algorithm and the first hex digits, enough to tell images apart."""
    if not value:
        return ""
    out = []
    for part in value.split(", "):
        m = re.search(rf"(sha256:)([0-9a-f]{{{keep}}})[0-9a-f]+", part)
        out.append(m.group(1) + m.group(2) if m else part)
    return ", ".join(out)


# --- Markdown ----------------------------------------------------------------------------------

class MdSafe(str):
    """Markdown that is already escaped (a table, a code block): the Markdown templates emit it as is."""


_MD_SPECIAL = re.compile(r"([\\`*\[\]|$~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")  # $: GitHub math
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")  # only a '<' that could open an HTML tag or comment
_ENTITY = re.compile(r"&(?=#?\w+;)")


def md_escape(value: Any) -> str:
    """Text that Markdown shows literally, safe inside a table cell: no pipes, tags, code or newlines.

    Underscores inside words and a '<' that cannot open a tag stay as they are, so the source stays readable.
    """
    if isinstance(value, MdSafe):
        return value
    text = "" if value is None else str(value)
    text = _ENTITY.sub("&amp;", text)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    text = _TAG_START.sub("&lt;", text)
    if text[:1] in ("#", ">", "-", "+", "="):
        text = "\\" + text  # would start a heading, quote or list where the value begins a line
    return re.sub(r"\s*[\r\n]+\s*", " ", text)


def md_code_block(text: str, lang: str = "text") -> MdSafe:
    """A fenced block whose fence is longer than any backtick run inside, so the text cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return MdSafe(f"{fence}{lang}\n{text.rstrip()}\n{fence}")


# --- Tables ------------------------------------------------------------------------------------

def md_table(table: Table) -> MdSafe:
    """A GitHub-flavoured Markdown table, every cell escaped, columns padded for readable source."""
    head = [md_escape(c) for c in table.columns]
    body = [[md_escape(c.text) for c in row] for row in table.rows]
    widths = [max(3, len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
    aligns = table.aligns()

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if a == "r" else c.ljust(w)
                                 for c, w, a in zip(cells, widths, aligns, strict=True)) + " |"

    rule = "| " + " | ".join(("-" * (w - 1) + ":") if a == "r" else "-" * w
                             for w, a in zip(widths, aligns, strict=True)) + " |"
    return MdSafe("\n".join([line(head), rule, *(line(r) for r in body)]))


# --- CSV ---------------------------------------------------------------------------------------

# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, neutralised with a leading single quote (OWASP);
    anything else, numbers included, unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(df: pd.DataFrame) -> str:
    """A frame as CSV for spreadsheets: every CSV the tool writes goes through here. Text cells (and headers)
    that would start a formula get a leading quote and are quoted; numbers stay numbers."""
    if df.shape[1] > 1:
        raw = df.to_csv(index=False, lineterminator="\r\n")
        if _as_written(raw, len(df) + 1):
            return raw.replace("\r\n", "\n")
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    out = df.copy()
    out.columns = [csv_cell(str(c)) for c in out.columns]
    for col in range(out.shape[1]):
        series = out.iloc[:, col]
        if not (is_numeric_dtype(series) or is_bool_dtype(series)):
            out[out.columns[col]] = series.astype(object).map(csv_cell)
    raw = out.to_csv(index=False, lineterminator="\r\n")  # so a field holding a CR or LF is quoted
    field = _csv_field
    return "".join(",".join([field(v) for v in row]) + "\n" for row in csv.reader(io.StringIO(raw, newline="")))


def _as_written(raw: str, lines: int) -> bool:
    """Whether pandas' CSV is already what the loop of csv_text writes, line for line: no field holds a line break,
    starts like a formula (a negative number does: the loop then decides) or starts with a quote (both are quoted
    there, which pandas' minimal quoting does not), and no row is one empty field (which pandas writes as "")."""
    return (raw.count("\n") == lines and raw.count("\r") == lines and not _SPECIAL_START.match(raw)
            and not _SPECIAL_AFTER.search(raw))


# A field, bare or quoted, that starts with a single quote or with what a spreadsheet runs as a formula (a line break
# only inside quotes: a bare field holds none, and ",\r\n" ends a row whose last field is empty).
_BARE = "'" + "".join(c for c in FORMULA_START if c not in "\r\n")
# Searched for after a comma or a line break, each pattern led by one character: twice as fast as `(?:^|,)` on a
# 7 MB repeats.csv.
_SPECIAL_START = re.compile(f'[{re.escape(_BARE)}]|"[{re.escape(_BARE)}\\r\\n]')
_SPECIAL_AFTER = re.compile(f'[\\n,](?:[{re.escape(_BARE)}]|"[{re.escape(_BARE)}\\r\\n])')
_QUOTE = re.compile(r'^\'|[,"\r\n]')


def _csv_field(value: str) -> str:
    """Quoted when neutralised (OWASP: quote such a cell too) or when CSV needs it, as csv.QUOTE_MINIMAL."""
    if _QUOTE.search(value):
        return '"' + value.replace('"', '""') + '"'
    return value


@dataclass
class Section:
    """A heading, an optional note and one table."""

    title: str
    table: Table
    note: str = ""


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame as JSON-ready records via pandas (NaN becomes null, numpy scalars plain numbers)."""
    if df.empty:
        return []
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object and any(isinstance(v, tuple) for v in out[col].tolist()):
            out[col] = out[col].map(list)
    result: list[dict[str, Any]] = json.loads(out.to_json(orient="records", double_precision=10))
    # pandas rounds to decimal places: below 1e-7 that keeps under three figures (a p-value of 4e-11 became 0, what a pair
    # without spread says), so those are written to ten significant figures.
    for col in out.columns:
        if out[col].dtype.kind != "f":
            continue
        values = out[col].to_numpy(dtype=float)
        for i in np.flatnonzero((np.abs(values) < 1e-7) & (values != 0)):
            result[i][str(col)] = float(f"{values[i]:.10g}")
    return result


_PLAIN = (str, int, float, type(None))  # bool is an int


def json_text(obj: Any) -> str:
    """`json.dumps(obj, indent=2, ensure_ascii=False)`, byte for byte: json's indented writer is pure Python (a second
    for a 10,000-repeat report), so each list or object that holds plain values only goes through the C writer, its
    separators carrying the indentation."""
    out: list[str] = []
    _json_into(obj, 0, out)
    return "".join(out)


def _json_into(obj: Any, level: int, out: list[str]) -> None:
    values: Iterable[Any]
    if isinstance(obj, dict):
        values, opening, closing = obj.values(), "{", "}"
    elif isinstance(obj, list | tuple):
        values, opening, closing = obj, "[", "]"
    else:
        out.append(_json_writer(level).encode(obj))
        return
    if not obj:
        out.append(opening + closing)
        return
    inner = "\n" + "  " * (level + 1)
    if all(isinstance(v, _PLAIN) for v in values):
        out.append(f"{opening}{inner}{_json_writer(level + 1).encode(obj)[1:-1]}\n{'  ' * level}{closing}")
        return
    out.append(opening)
    for i, item in enumerate(obj.items() if isinstance(obj, dict) else obj):
        out.append(inner if not i else "," + inner)
        if isinstance(obj, dict):
            out.append(_json_key(item[0]) + ": ")
            item = item[1]
        _json_into(item, level + 1, out)
    out.append(f"\n{'  ' * level}{closing}")


_WRITERS: dict[int, json.JSONEncoder] = {}


def _json_writer(level: int) -> json.JSONEncoder:
    """json's C writer, its items parted as the indented writer parts them at `level`."""
    if level not in _WRITERS:
        _WRITERS[level] = json.JSONEncoder(ensure_ascii=False, separators=(",\n" + "  " * level, ": "))
    return _WRITERS[level]


def _json_key(key: Any) -> str:
    """An object's key as json writes it (a number, a boolean or null turned into a string)."""
    if not isinstance(key, str):
        key = next(iter(json.loads(json.dumps({key: 0}))))
    return json.dumps(key, ensure_ascii=False)
