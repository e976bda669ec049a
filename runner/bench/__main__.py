"""`python -m runner.bench ARGS` from a checkout; the zipapp's own __main__ calls the same run()."""

from .main import run

run()
