"""`python -m runner.bench ARGS` from a checkout; the zipapp's own __main__ dispatches the same way."""

import sys

from . import tether

tether.from_environment()
if sys.argv[1:2] == ["workload"]:
    from .workload import run
else:
    from .main import run
run()
