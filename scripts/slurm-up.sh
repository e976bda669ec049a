#!/usr/bin/env bash
# Bring up a real Slurm with accounting on this machine, from Debian's packages: the controller's
# own node (partition `debug`, the default) and SLURM_NODES more nodes, each in its own network and
# UTS namespace with its own hostname and address (partition `multi`, scripts/slurm-nodes.sh).
#
# Run as root. Idempotent: installs what is missing, rewrites the configuration from
# scripts/slurm/*.in, (re)starts only the daemons that are down or whose configuration
# changed, then waits until `sinfo` shows the node idle and `sacct` answers.
# No systemd is needed: every daemon is started directly and logs to /var/log/slurm/
# (munged to /var/log/munge/, MariaDB to its usual log).
#
# Environment knobs (all optional):
#   SLURM_CLUSTER     cluster name                (default: matrix)
#   SLURM_PARTITION   the one partition's name    (default: debug)
#   SLURM_SHARE       jobs that may share one CPU (default: 4)
#   SLURM_NODES       namespaced nodes in `multi` (default: 3; node1 ... nodeN)
#   SLURM_SUBNET      their bridge's /24, three octets (default: 10.77.0)
#   SLURM_NO_TORCH=1  skip python3-torch/python3-torchvision (the bare-metal PyTorch 1.13)
set -euo pipefail
# shellcheck source=scripts/apt-wait.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-wait.sh"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TEMPLATES="$HERE/slurm"
CLUSTER="${SLURM_CLUSTER:-matrix}"
PARTITION="${SLURM_PARTITION:-debug}"
SHARE="${SLURM_SHARE:-4}"
NODES="${SLURM_NODES:-3}"
SUBNET="${SLURM_SUBNET:-10.77.0}"
export SLURM_NODES="$NODES" SLURM_SUBNET="$SUBNET"
HOST="$(hostname -s)"
DBUSER=slurm
ETC=/etc/slurm

log() { printf 'slurm-up: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts daemons)"

# ---------------------------------------------------------------- packages
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server mariadb-client)
if [ "${SLURM_NO_TORCH:-0}" != 1 ]; then
    PACKAGES+=(python3-torch python3-torchvision)
fi
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Other installs (another service script) may hold the dpkg lock: wait for it.
    apt_get update -qq
    # policy-rc.d: the packages' scripts must not start daemons (unconfigured, no init here);
    # this script starts them below. One left by someone else is kept as it is.
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if [ "$own_policy" = 1 ]; then
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    fi
fi

pid_alive() {  # pid_alive PIDFILE: the daemon whose pid is in the file is running
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop_pidfile() {  # stop_pidfile PIDFILE NAME: TERM the daemon, wait for it to go
    local pid
    pid_alive "$1" || return 0
    pid="$(cat "$1")"
    log "stopping $2 (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...: retry COMMAND until it succeeds
    local seconds="$1" what="$2"
    shift 2
    for _ in $(seq 1 "$((seconds * 2))"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "$what did not come up within ${seconds}s; see the logs under /var/log/slurm/ and /var/log/munge/"
}

install_file() {  # install_file SRC DEST MODE OWNER: copy if different; prints 1 if changed
    if [ -f "$2" ] && cmp -s "$1" "$2"; then
        rm -f "$1"
        echo 0
    else
        install -m "$3" -o "$4" -g "$4" "$1" "$2"
        rm -f "$1"
        echo 1
    fi
}

# ---------------------------------------------------------------- munge
install -d -m 0700 -o munge -g munge /etc/munge /var/lib/munge
install -d -m 0755 -o munge -g munge /run/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating the munge key"
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged --force
    wait_for 20 munged sh -c 'munge -n | unmunge'
fi

# ---------------------------------------------------------------- MariaDB
install -d -m 0755 -o mysql -g mysql /run/mysqld
if ! mysqladmin --protocol=socket ping >/dev/null 2>&1; then
    log "starting MariaDB"
    if [ -x /etc/init.d/mariadb ]; then
        /etc/init.d/mariadb start >/dev/null 2>&1 || true
    fi
    if ! mysqladmin --protocol=socket ping >/dev/null 2>&1; then
        setsid nohup mysqld_safe --user=mysql >/var/log/mysqld_safe.log 2>&1 < /dev/null &
    fi
    wait_for 60 MariaDB mysqladmin --protocol=socket ping
fi

# The database password lives only in slurmdbd.conf (mode 600); reuse it across runs.
DBPASS=""
if [ -f "$ETC/slurmdbd.conf" ]; then
    DBPASS="$(sed -n 's/^StoragePass=//p' "$ETC/slurmdbd.conf")"
fi
[ -n "$DBPASS" ] || DBPASS="$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
mysql --protocol=socket <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS '$DBUSER'@'localhost' IDENTIFIED BY '$DBPASS';
ALTER USER '$DBUSER'@'localhost' IDENTIFIED BY '$DBPASS';
GRANT ALL ON slurm_acct_db.* TO '$DBUSER'@'localhost';
FLUSH PRIVILEGES;
SQL

# ---------------------------------------------------------------- configuration
install -d -m 0755 "$ETC"
install -d -m 0755 -o slurm -g slurm /run/slurm /var/log/slurm /var/lib/slurm /var/lib/slurm/slurmctld
install -d -m 0755 /var/lib/slurm/slurmd

CPUS="$(nproc)"
# slurmd -C reports the memory it will see; ask for less, or the node drains as "Low RealMemory".
SEEN_MB="$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n1)"
[ -n "$SEEN_MB" ] || SEEN_MB="$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)"
MEMORY="$((SEEN_MB * 9 / 10))"
NODE_MEMORY="$((MEMORY / NODES))"
case "$NODES" in ''|*[!0-9]*|0) die "SLURM_NODES must be a whole number of at least 1, not '$NODES'" ;; esac

render() {  # render TEMPLATE: fill the @VAR@ placeholders
    sed -e "s|@CLUSTER@|$CLUSTER|g" -e "s|@HOST@|$HOST|g" -e "s|@CPUS@|$CPUS|g" \
        -e "s|@MEMORY@|$MEMORY|g" -e "s|@PARTITION@|$PARTITION|g" -e "s|@SHARE@|$SHARE|g" \
        -e "s|@DBUSER@|$DBUSER|g" -e "s|@DBPASS@|$DBPASS|g" -e "s|@NODES@|$NODES|g" \
        -e "s|@SUBNET@|$SUBNET|g" -e "s|@LAST_ADDR@|$((10 + NODES))|g" -e "s|@NODE_MEMORY@|$NODE_MEMORY|g" "$1"
}

tmp="$(mktemp)"
render "$TEMPLATES/slurmdbd.conf.in" > "$tmp"
dbd_changed="$(install_file "$tmp" "$ETC/slurmdbd.conf" 0600 slurm)"
tmp="$(mktemp)"
render "$TEMPLATES/slurm.conf.in" > "$tmp"
conf_changed="$(install_file "$tmp" "$ETC/slurm.conf" 0644 root)"

# A state directory written for another cluster name makes slurmctld refuse to start.
if [ -f /var/lib/slurm/slurmctld/clustername ] \
   && [ "$(cat /var/lib/slurm/slurmctld/clustername)" != "$CLUSTER" ]; then
    log "state directory belongs to another cluster name: starting it afresh"
    stop_pidfile /run/slurm/slurmctld.pid slurmctld
    rm -rf /var/lib/slurm/slurmctld/*
fi

# ---------------------------------------------------------------- daemons
if [ "$dbd_changed" = 1 ]; then stop_pidfile /run/slurm/slurmdbd.pid slurmdbd; fi
if ! pid_alive /run/slurm/slurmdbd.pid; then
    log "starting slurmdbd"
    /usr/sbin/slurmdbd
fi
wait_for 60 slurmdbd sacctmgr -n list cluster

if ! sacctmgr -n -P list cluster format=Cluster | grep -qx "$CLUSTER"; then
    log "registering cluster $CLUSTER with accounting"
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi

# slurmctld registers with slurmdbd when it starts: restart it after the cluster is known.
restart_ctld="$conf_changed"
if ! pid_alive /run/slurm/slurmctld.pid; then restart_ctld=1; fi
if [ "$restart_ctld" = 1 ]; then
    stop_pidfile /run/slurm/slurmctld.pid slurmctld
    log "starting slurmctld"
    /usr/sbin/slurmctld
fi
wait_for 60 slurmctld scontrol ping

if [ "$conf_changed" = 1 ] || ! pid_alive /run/slurm/slurmd.pid; then
    stop_pidfile /run/slurm/slurmd.pid slurmd
    log "starting slurmd"
    /usr/sbin/slurmd
fi

node_ready() {
    local state
    state="$(sinfo -h -n "$HOST" -o '%t' 2>/dev/null | head -n1)"
    case "$state" in
        idle*|mix*|alloc*) return 0 ;;
        drain*|down*|fail*|inval*)
            scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
            return 1 ;;
        *) return 1 ;;
    esac
}
wait_for 90 "the node $HOST" node_ready

# The namespaced nodes: restarted with slurmctld when the configuration changed.
if [ "$conf_changed" = 1 ]; then
    bash "$HERE/slurm-nodes.sh" up --restart
else
    bash "$HERE/slurm-nodes.sh" up
fi
multi_ready() {  # every node of `multi` takes jobs; a drained or down one is resumed
    local name state ok=0
    while read -r name state; do
        case "$state" in
            idle*|mix*|alloc*) ;;
            *) ok=1
               case "$state" in drain*|down*|fail*) scontrol update nodename="$name" state=resume >/dev/null 2>&1 || true ;; esac ;;
        esac
    done < <(sinfo -h -N -p multi -o '%N %t' 2>/dev/null)
    [ "$(sinfo -h -N -p multi -o '%N' 2>/dev/null | wc -l)" -eq "$NODES" ] && return "$ok"
    return 1
}
wait_for 90 "the nodes of partition multi" multi_ready
wait_for 60 "accounting (sacct)" sacct -n -X -S now-1minutes

log "ready: cluster $CLUSTER, node $HOST ($CPUS CPUs, ${MEMORY} MB), partition $PARTITION;" \
    "partition multi: node[1-$NODES] at $SUBNET.[11-$((10 + NODES))] (sharing those CPUs)"
sinfo
