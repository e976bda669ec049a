# Sourced by the install scripts: `apt_get ARGS...` is apt-get that waits, with a bound, for another
# apt-get or dpkg on this host (a fresh machine runs unattended upgrades; services.sh runs several
# installs side by side). dpkg's lock is waited for by apt itself (DPkg::Lock::Timeout); the package
# lists' lock (/var/lib/apt/lists/lock, taken by `apt-get update`) is not, so a refusal naming a lock
# is tried again every APT_LOCK_POLL seconds until APT_LOCK_WAIT seconds have passed.
#   APT_LOCK_WAIT  seconds to wait for a lock in all (default 600)
#   APT_LOCK_POLL  seconds between tries (default 5)
#   APT_GET        the apt-get to run (default: apt-get; a test puts a fake one here)

apt_get() {
    local wait="${APT_LOCK_WAIT:-600}" poll="${APT_LOCK_POLL:-5}" started=$SECONDS err rc
    err="$(mktemp)"
    while :; do
        rc=0
        ${SUDO:-} "${APT_GET:-apt-get}" -o DPkg::Lock::Timeout="$wait" "$@" 2>"$err" || rc=$?
        cat "$err" >&2
        if [ "$rc" -eq 0 ] || ! grep -qiE "could not get lock|unable to lock|is another process using it" "$err"; then
            rm -f "$err"
            return "$rc"
        fi
        if [ $((SECONDS - started)) -ge "$wait" ]; then
            printf 'apt-get: another package manager still holds its lock after %ss; run again when it ends (APT_LOCK_WAIT=%s)\n' \
                "$wait" "$wait" >&2
            rm -f "$err"
            return "$rc"
        fi
        printf 'apt-get: another package manager holds its lock; trying again in %ss\n' "$poll" >&2
        sleep "$poll"
    done
}
