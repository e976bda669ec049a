#!/usr/bin/env bash
# Install and start what the integration tests talk to: a Docker engine with the Debian-built
# test image, Podman (its Docker-compatible API on /run/podman/podman.sock) and Charliecloud with that
# image loaded and converted, a Slurm with accounting (partition debug: this machine; partition multi:
# three namespaced nodes, scripts/slurm-nodes.sh), and headless Chromium. Needs root.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "services: not root, so not installing Docker, Podman, Charliecloud, Slurm or Chromium; their tests will skip" >&2
  exit 0
fi
failed=0
step() {  # step SCRIPT: run one setup script, say when it fails
  echo "== services: $1"
  if ! bash "scripts/$1"; then
    echo "services: $1 failed (see its output above)" >&2
    return 1
  fi
}
step docker-up.sh || failed=1
# Podman and Charliecloud take the test image from Docker; loading and converting it is slow (minutes on
# a fresh machine) but needs no apt lock for long, so it runs beside Slurm's and Chromium's installs.
runtimes_log="$(mktemp)"
( step podman-up.sh; a=$?; step charliecloud-up.sh; b=$?; [ "$a" = 0 ] && [ "$b" = 0 ] ) >"$runtimes_log" 2>&1 &
runtimes=$!
for s in slurm-up.sh browser-setup.sh; do step "$s" || failed=1; done
wait "$runtimes" || failed=1
cat "$runtimes_log"
rm -f "$runtimes_log"
# Outside CI a missing service only skips its tests; in CI the tests themselves fail loudly.
if [ "$failed" = 1 ] && [ "${CI:-}" = true ]; then exit 1; fi
exit 0
