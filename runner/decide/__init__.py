"""Decisions over the result store: references (pass/fail against expected values), the regression gate of
`matrix compare --fail-on`, the adaptive-repeat stopping rule and a cell's history across runs.

Each module is pure: it takes frames or values and returns verdicts; the CLI and the run loop print them.
"""
