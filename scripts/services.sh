#!/usr/bin/env bash
# Install and start what the integration tests talk to: a Docker engine with the Debian-built
# test image, a Slurm with accounting (partition debug: this machine; partition multi: three namespaced
# nodes, scripts/slurm-nodes.sh), and headless Chromium. Needs root.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "services: not root, so not installing Docker, Slurm or Chromium; their tests will skip" >&2
  exit 0
fi
failed=0
for step in docker-up.sh slurm-up.sh browser-setup.sh; do
  echo "== services: $step"
  if ! bash "scripts/$step"; then
    echo "services: $step failed (see its output above)" >&2
    failed=1
  fi
done
# Outside CI a missing service only skips its tests; in CI the tests themselves fail loudly.
if [ "$failed" = 1 ] && [ "${CI:-}" = true ]; then exit 1; fi
exit 0
