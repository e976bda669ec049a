#!/usr/bin/env bash
# Bring up a Docker engine on this host and build the CPU test image, idempotently.
#
# As root: installs Debian's docker.io and debootstrap if dockerd is missing, starts dockerd
# in the background if no engine answers (log: /var/log/matrix-dockerd.log), waits until it
# answers, then builds matrix/debian-torch:1.13 (skipped when the tag exists).
# `make services` calls this; it is safe to run again.
set -euo pipefail
# shellcheck source=scripts/apt-wait.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-wait.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOG=/var/log/matrix-dockerd.log
WAIT_S="${MATRIX_DOCKERD_WAIT:-60}"

if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi

say() { printf 'docker-up: %s\n' "$*" >&2; }

# True when an engine answers through the SDK (DOCKER_HOST and contexts respected).
engine_answers() {
    "$PY" - <<'EOF' >/dev/null 2>&1
import docker
docker.from_env(timeout=5).ping()
EOF
}

if engine_answers; then
    say "engine already answering"
else
    if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
        if [ "$(id -u)" != 0 ]; then
            say "dockerd/debootstrap missing and not root: run as root, or: apt-get install docker.io debootstrap"
            exit 1
        fi
        say "installing docker.io and debootstrap (apt)"
        export DEBIAN_FRONTEND=noninteractive
        apt_get update -qq
        apt_get install -y -qq docker.io debootstrap >/dev/null
    fi
    if [ "$(id -u)" != 0 ]; then
        say "no engine answers and starting dockerd needs root: sudo $0"
        exit 1
    fi
    # A pidfile from a dockerd that died would make a new one refuse to start.
    if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
        rm -f /var/run/docker.pid
    fi
    if ! { [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; }; then
        say "starting dockerd (log: $LOG)"
        # containerd is started by dockerd itself when it is not already running.
        # From /: the daemon must not keep the caller's folder (a checkout that may be deleted) as its own.
        (cd / && exec nohup dockerd) >>"$LOG" 2>&1 </dev/null &
    fi
    for _ in $(seq 1 "$WAIT_S"); do
        if engine_answers; then break; fi
        sleep 1
    done
    if ! engine_answers; then
        say "dockerd did not answer within ${WAIT_S}s; last lines of $LOG:"
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
    say "engine answering"
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt_get update -qq && DEBIAN_FRONTEND=noninteractive apt_get install -y -qq debootstrap >/dev/null
    fi
fi

exec bash "$ROOT/images/debian-torch/build.sh"
