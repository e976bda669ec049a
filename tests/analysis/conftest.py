"""The checked-in results' store (tests/report/fixtures/results.json), which the statistics are also checked
against (test_analysis.py): the report tests' fixture, defined once beside its data."""

from __future__ import annotations

from tests.report.conftest import db  # noqa: F401
