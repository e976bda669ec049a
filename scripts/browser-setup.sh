#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium for the HTML report tests (tests/report, marker `browser`).
# Idempotent: does nothing when /usr/bin/chromium is already there. Needs root (or sudo) for apt-get.
set -euo pipefail
# shellcheck source=scripts/apt-wait.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-wait.sh"

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    echo "chromium already installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "browser-setup: need root (or sudo) to apt-get install chromium" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
# The package lists may be missing on a fresh machine; install fails without them.
if ! apt_get install -y --no-install-recommends chromium; then
    apt_get update
    apt_get install -y --no-install-recommends chromium
fi

"$CHROMIUM" --version
