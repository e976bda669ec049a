#!/usr/bin/env bash
# Charliecloud for the tests, idempotently, as root: Debian's charliecloud 0.31 (ch-run, ch-convert) and
# the CPU test image converted from Docker into an image directory (no registry) under
# /var/cache/matrix/charliecloud/, where the other built images are cached too.
#
# The conversion (`ch-convert -i docker`) takes minutes (2 min 44 s for the 1.3 GB image on the 2-vCPU
# VM), so it runs only when the directory is missing or was made from another Docker image id (kept in
# DIR.source). ch-run and ch-convert need USER set; under `sudo` or a bare root shell it may not be.
# `scripts/services.sh` calls it after docker-up.sh.
set -euo pipefail
# shellcheck source=scripts/apt-wait.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-wait.sh"

IMAGE="${MATRIX_TEST_IMAGE:-matrix/debian-torch:1.13}"
CACHE=/var/cache/matrix/charliecloud
DIR="$CACHE/$(printf '%s' "$IMAGE" | sed 's|.*/||; s|:|-|g')"
export USER="${USER:-$(id -un)}"

say() { printf 'charliecloud-up: %s\n' "$*" >&2; }
[ "$(id -u)" -eq 0 ] || { say "run as root (it installs packages)"; exit 1; }

if ! command -v ch-run >/dev/null 2>&1 || ! command -v ch-convert >/dev/null 2>&1; then
    say "installing charliecloud-runtime and charliecloud-builders (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt_get update -qq
    apt_get install -y -qq --no-install-recommends \
        charliecloud-runtime charliecloud-builders >/dev/null
fi

docker() { env -u DOCKER_HOST docker "$@"; }  # the Docker engine, even where DOCKER_HOST points at podman
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "$IMAGE is not in Docker (images/debian-torch/build.sh builds it): not converting it"
    exit 1
fi
source_id="$(docker image inspect --format '{{.Id}}' "$IMAGE")"
if [ -d "$DIR" ] && [ "$(cat "$DIR.source" 2>/dev/null)" = "$source_id" ]; then
    say "$DIR is $IMAGE (${source_id:7:12})"
    exit 0
fi
install -d -m 0755 "$CACHE"
rm -rf "$DIR.tmp"
say "converting $IMAGE into $DIR (ch-convert, a few minutes)"
started="$(date +%s)"
# ch-convert reads the image through the docker CLI (`docker export`), so DOCKER_HOST must not point elsewhere.
env -u DOCKER_HOST ch-convert -i docker "$IMAGE" "$DIR.tmp" >/dev/null
rm -rf "$DIR" "$DIR.source"
mv "$DIR.tmp" "$DIR"
printf '%s\n' "$source_id" > "$DIR.source"
say "converted in $(( $(date +%s) - started )) s: $DIR"
