#!/usr/bin/env bash
# The compute nodes of the multi-node partition: one network + UTS + mount namespace per node.
#
#   scripts/slurm-nodes.sh up [--restart]   create what is missing and start every node's slurmd
#   scripts/slurm-nodes.sh down             stop every node's processes, remove the namespaces
#   scripts/slurm-nodes.sh status           one line per node: namespace, address, slurmd pid
#   scripts/slurm-nodes.sh kill NODE        power a node off: SIGKILL all its processes, cut its link
#   scripts/slurm-nodes.sh start NODE       bring one node (back) up
#
# Run as root; slurm-up.sh calls `up` after slurmctld is up. Each node is a real separate host to
# everything that talks over the network: its own hostname (UTS namespace), its own address on a
# bridge (network namespace + veth), slurmd on the standard port 6818 of that address. The nodes
# share this machine's filesystem, which plays the cluster's shared file system (every path is the
# same on every node and on the controller); node-local state (/run/slurm, the slurmd spool and log)
# is a per-node directory bind-mounted at the usual path inside the node's mount namespace. munged
# runs once, on the controller: its socket is a filesystem path, which works across network
# namespaces, so all nodes use the one key. Traffic stays on the bridge; nothing leaves the machine.
#
# Knobs (the same ones slurm-up.sh renders into slurm.conf):
#   SLURM_NODES   how many nodes             (default 3; node1 ... nodeN)
#   SLURM_SUBNET  the bridge's /24, 3 octets  (default 10.77.0: controller .1, nodeK .10+K)
set -euo pipefail

NODES="${SLURM_NODES:-3}"
SUBNET="${SLURM_SUBNET:-10.77.0}"
BRIDGE=mxbr0
CTLD_ADDR="$SUBNET.1"
STATE=/var/lib/slurm/nodes     # per-node spool, under the node's name
RUNDIR=/run/slurm/nodes        # per-node /run/slurm (the slurmd pid file)
LOGDIR=/var/log/slurm/nodes    # per-node /var/log/slurm (slurmd.log)
CONTROLLER="$(hostname -s)"

log() { printf 'slurm-nodes: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (it creates network namespaces and starts slurmd)"

node_names() { seq -f 'node%g' 1 "$NODES"; }
node_addr() { echo "$SUBNET.$((10 + ${1#node}))"; }
netns() { echo "mx-$1"; }
host_veth() { echo "mxv$1"; }   # "mxvnode1": 8 characters, well below IFNAMSIZ

stale_binds() {  # NODE's slurmd sees a node-local file through a mount of a deleted one (an older script replaced it)
    local pid
    pid="$(slurmd_pid "$1")"
    [ -n "$pid" ] && grep -q '//deleted ' "/proc/$pid/mountinfo" 2>/dev/null
}

slurmd_pid() {  # the pid of NODE's slurmd, from its own pid file; empty if not running
    local f="$RUNDIR/$1/slurmd.pid" pid
    [ -s "$f" ] || return 0
    pid="$(cat "$f")"
    # A pid file left by a node that was killed may name an unrelated process: check it is slurmd.
    if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmd ]; then
        echo "$pid"
    fi
}

bridge_up() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
    fi
    ip addr replace "$CTLD_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    # Docker loads br_netfilter and sets the FORWARD policy to DROP: without this rule the nodes
    # reach the controller but not each other.
    if command -v iptables >/dev/null 2>&1; then
        iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null \
            || iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
    fi
}

hosts_file() {  # what every node sees as /etc/hosts (bind-mounted from /etc/netns/NS/hosts)
    printf '127.0.0.1\tlocalhost\n%s\t%s\n' "$CTLD_ADDR" "$CONTROLLER"
    local n
    for n in $(node_names); do printf '%s\t%s\n' "$(node_addr "$n")" "$n"; done
}

node_net() {  # node_net NODE: its namespace, veth pair and address (idempotent)
    local n="$1" ns hv
    ns="$(netns "$n")"
    hv="$(host_veth "$n")"
    ip netns list | grep -qw "$ns" || ip netns add "$ns"
    if ! ip link show "$hv" >/dev/null 2>&1; then
        ip link add "$hv" type veth peer name eth0 netns "$ns"
    fi
    ip link set "$hv" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr replace "$(node_addr "$n")/24" dev eth0
    ip -n "$ns" link set eth0 up
    install -d -m 0755 "/etc/netns/$ns"
    # Written in place, and only when it changes: the node's /etc/hosts is a bind mount of this file, and
    # replacing the file (a new inode) would leave that mount on a deleted one, which a container
    # runtime cannot bind again (ch-run: "can't bind /etc/hosts ...: No such file or directory").
    hosts_file > "/etc/netns/$ns/hosts.tmp"
    if ! cmp -s "/etc/netns/$ns/hosts.tmp" "/etc/netns/$ns/hosts"; then
        cat "/etc/netns/$ns/hosts.tmp" > "/etc/netns/$ns/hosts"
    fi
    rm -f "/etc/netns/$ns/hosts.tmp"
    install -d -m 0755 -o slurm -g slurm "$RUNDIR/$n" "$LOGDIR/$n"
    install -d -m 0755 "$STATE/$n"
}

start_slurmd() {  # start_slurmd NODE: slurmd inside the node's namespaces, with its own hostname
    local n="$1" ns
    ns="$(netns "$n")"
    log "starting slurmd on $n ($(node_addr "$n"))"
    # nsenter --net: the node's network namespace; unshare: its own hostname (UTS) and a mount
    # namespace whose binds make /etc/hosts, /run/slurm, the spool and /var/log/slurm node-local
    # while the rest of the filesystem stays shared. (Not `ip netns exec`: it remounts /sys, and
    # slurmd then finds no /sys/fs/cgroup.)
    nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation slave -- sh -ec '
        hostname "$1"
        mount --bind "$2" /etc/hosts
        mount --bind "$3" /run/slurm
        mount --bind "$4" /var/lib/slurm/slurmd
        mount --bind "$5" /var/log/slurm
        exec /usr/sbin/slurmd -N "$1"
    ' node-start "$n" "/etc/netns/$ns/hosts" "$RUNDIR/$n" "$STATE/$n" "$LOGDIR/$n"
    local _
    for _ in $(seq 1 50); do
        [ -n "$(slurmd_pid "$n")" ] && return 0
        sleep 0.1
    done
    die "slurmd on $n did not start: see $LOGDIR/$n/slurmd.log"
}

kill_node() {  # kill_node NODE: every process in its namespace, at once, with no goodbye
    local n="$1" ns pids
    ns="$(netns "$n")"
    ip netns list | grep -qw "$ns" || return 0
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill -9 $pids 2>/dev/null || true
    fi
    rm -f "$RUNDIR/$n/slurmd.pid"
}

cmd_up() {
    local restart=0 n
    [ "${1:-}" = --restart ] && restart=1
    bridge_up
    for n in $(node_names); do
        node_net "$n"
        if { [ "$restart" = 1 ] || stale_binds "$n"; } && [ -n "$(slurmd_pid "$n")" ]; then
            log "restarting slurmd on $n (configuration changed, or its /etc/hosts mount went stale)"
            kill "$(slurmd_pid "$n")" 2>/dev/null || true
            for _ in $(seq 1 50); do [ -z "$(slurmd_pid "$n")" ] && break; sleep 0.1; done
        fi
        [ -n "$(slurmd_pid "$n")" ] || start_slurmd "$n"
    done
}

cmd_down() {
    local n ns
    for n in $(node_names); do
        ns="$(netns "$n")"
        if [ -n "$(slurmd_pid "$n")" ]; then
            log "stopping slurmd on $n"
            kill "$(slurmd_pid "$n")" 2>/dev/null || true
            sleep 0.5
        fi
        kill_node "$n"
        ip link del "$(host_veth "$n")" 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
        rm -rf "/etc/netns/$ns"
    done
    if command -v iptables >/dev/null 2>&1; then
        iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null || true
    fi
    ip link del "$BRIDGE" 2>/dev/null || true
    # The controller keeps the nodes in its configuration; it marks them DOWN (not responding).
}

cmd_status() {
    local n pid
    for n in $(node_names); do
        pid="$(slurmd_pid "$n")"
        printf '%s\t%s\tnetns %s\tslurmd %s\n' "$n" "$(node_addr "$n")" "$(netns "$n")" "${pid:-down}"
    done
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    kill)
        [ -n "${2:-}" ] || die "usage: $0 kill NODE"
        log "killing $2 (all its processes, link cut)"
        kill_node "$2"
        ip link set "$(host_veth "$2")" down 2>/dev/null || true ;;
    start)
        [ -n "${2:-}" ] || die "usage: $0 start NODE"
        bridge_up
        node_net "$2"
        [ -n "$(slurmd_pid "$2")" ] || start_slurmd "$2" ;;
    *) die "usage: $0 up [--restart] | down | status | kill NODE | start NODE" ;;
esac
