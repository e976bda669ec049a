"""Bisect's client side: the ordered environments of a bisect (envs) and measuring a cell in them through
the run (measure); the search itself is runner/analysis/bisect.py."""
