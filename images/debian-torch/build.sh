#!/usr/bin/env bash
# Build matrix/debian-torch:1.13, the CPU test image (Debian bookworm's PyTorch 1.13, no registry):
# the `2022` recipe of images/recipes.py, built by images/build.py. Skips when the tag exists;
# --force rebuilds, --drop-rootfs deletes the cached rootfs afterwards.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
exec "$PY" "$ROOT/images/build.py" 2022 "$@"
