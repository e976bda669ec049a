#!/usr/bin/env bash
# Podman for the tests, idempotently, as root: Debian's podman (4.3), its Docker-compatible API on its own
# socket (dockerd keeps /var/run/docker.sock), and the CPU test image loaded from Docker (no registry).
#
#   - installs podman when missing (apt, no recommends: runc from docker.io is its OCI runtime);
#   - writes /etc/containers/containers.conf.d/matrix-ulimits.conf: podman asks for more open files
#     (1048576) and processes than this machine lets a container set ("error setting rlimit type 7/6:
#     operation not permitted"), so its containers get this machine's own hard limits instead;
#   - starts `podman system service` on $MATRIX_PODMAN_SOCKET (default /run/podman/podman.sock;
#     log /var/log/matrix-podman.log) unless one answers there;
#   - loads matrix/debian-torch:1.13 from Docker (`docker save | podman load`, about a minute) unless
#     podman has that image with Docker's image id.
# `scripts/services.sh` calls it after docker-up.sh; a second call returns in about a second.
set -euo pipefail
# shellcheck source=scripts/apt-wait.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-wait.sh"

SOCKET="${MATRIX_PODMAN_SOCKET:-/run/podman/podman.sock}"
LOG=/var/log/matrix-podman.log
IMAGE="${MATRIX_TEST_IMAGE:-matrix/debian-torch:1.13}"
WAIT_S=30

say() { printf 'podman-up: %s\n' "$*" >&2; }
[ "$(id -u)" -eq 0 ] || { say "run as root (it installs podman and starts its service)"; exit 1; }

if ! command -v podman >/dev/null 2>&1; then
    say "installing podman (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt_get update -qq
    apt_get install -y -qq --no-install-recommends podman >/dev/null
fi

# Limits a container may have here: the open files this shell may have, and no more processes than
# pid_max (podman's conmon runs with that many at most).
nofile="$(ulimit -Hn)"
nproc="$(ulimit -Hu)"
pid_max="$(cat /proc/sys/kernel/pid_max)"
if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc="$pid_max"; fi
if [ "$nofile" = unlimited ]; then nofile="$(cat /proc/sys/fs/nr_open)"; fi
conf=/etc/containers/containers.conf.d/matrix-ulimits.conf
want="$(printf '# written by matrix scripts/podman-up.sh: this machine cannot give containers more\n[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
    "$nofile" "$nofile" "$nproc" "$nproc")"
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    say "container limits: nofile $nofile, nproc $nproc ($conf)"
    install -d -m 0755 "$(dirname "$conf")"
    printf '%s\n' "$want" > "$conf"
fi

answers() { curl -sf --max-time 5 --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1; }
if ! command -v curl >/dev/null 2>&1; then
    apt_get install -y -qq --no-install-recommends curl >/dev/null
fi
# A service started from a folder since deleted (an earlier checkout's) answers its ping but cannot start a
# container ("write child: broken pipe"): stop it, to start a new one below.
for pid in $(pgrep -f "podman system service.*unix://$SOCKET" || true); do
    if [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == *"(deleted)" ]]; then
        say "the service (pid $pid) runs in a deleted folder: restarting it"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 10); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    fi
done
if answers; then
    say "service already answering at unix://$SOCKET"
else
    install -d -m 0755 "$(dirname "$SOCKET")"
    rm -f "$SOCKET"
    say "starting podman system service at unix://$SOCKET (log: $LOG)"
    # --time=0: never exit for idleness; setsid: not tied to this shell.
    # Started from /: a service whose folder is deleted later (a checkout removed) can no longer start containers.
    (cd / && exec setsid nohup podman system service --time=0 "unix://$SOCKET") >>"$LOG" 2>&1 </dev/null &
    for _ in $(seq 1 "$WAIT_S"); do answers && break; sleep 1; done
    if ! answers; then
        say "podman's service did not answer within ${WAIT_S}s; last lines of $LOG:"
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
fi

docker() { env -u DOCKER_HOST docker "$@"; }  # the Docker engine, even where DOCKER_HOST points at podman
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "$IMAGE is not in Docker (images/debian-torch/build.sh builds it): not loading it into podman"
    exit 1
fi
docker_id="$(docker image inspect --format '{{.Id}}' "$IMAGE")"
podman_id="$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
if [ "sha256:${podman_id#sha256:}" = "$docker_id" ]; then
    say "$IMAGE already loaded (${docker_id:7:12})"
else
    say "loading $IMAGE from Docker into podman (docker save | podman load)"
    docker save "$IMAGE" | podman load -q >/dev/null
    say "loaded $IMAGE ($(podman image inspect --format '{{.Id}}' "$IMAGE" | cut -c1-12))"
fi
