"""Results that travel between machines: one portable, versioned file per export (runner/exchange/format.py,
docs/exchange.md); the store side of an import is runner/store/exchange.py."""

from runner.exchange.format import FORMAT, READS, SCHEMA, SUFFIX, Bundle, DamagedFile, digest, read, write

__all__ = ["FORMAT", "READS", "SCHEMA", "SUFFIX", "Bundle", "DamagedFile", "digest", "read", "write"]
