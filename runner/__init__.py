"""matrix: benchmark deep-learning training across environments and precisions."""

from __future__ import annotations

__version__ = "0.1.0"
