#!/usr/bin/env bash
# Build matrix/debian-torch:1.13, the CPU test image, from Debian's packages (no registry).
# Skips when the tag exists; see build.py for the steps and its --help for options.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
exec "$PY" "$HERE/build.py" "$@"
