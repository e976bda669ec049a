"""What the device did during the measured window (clocks, power, temperature, utilisation).

The seam for an NVML sampler: `start(device)` is called just before the window opens and returns a
function that timing.py calls just after it closes. Nothing is sampled yet, so that function returns
None and the result carries no telemetry (docs/internals.md, "bench's seams").
"""


def start(device):
    """Begin sampling `device`; returns stop(), which ends sampling and returns a dict or None."""
    return _nothing


def _nothing():
    return None
