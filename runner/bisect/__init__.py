"""Bisect's client side: the ordered environments of a bisect (envs) and measuring a cell in them through
the run (store_measure); the search itself is runner/analysis/bisect_search.py."""
