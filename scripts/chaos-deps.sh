#!/usr/bin/env bash
# What the fault tests (tests/chaos/) need, from Debian's packages only: iproute2 (`ip netns`,
# veth, a bridge), iptables (partitions as DROP rules in each namespace) and faketime
# (libfaketime, clock skew); and openssl, with which the security tests make their certificates,
# and kcat, the librdkafka CLI they run over SASL and mTLS.
# The machines run as root; a package already there is kept.
#
# usage: scripts/chaos-deps.sh DEST_DIR   (DEST_DIR/.installed marks the step done)
set -euo pipefail

DEST=$(realpath -m "${1:?usage: chaos-deps.sh DEST_DIR}")
wanted=()
command -v ip >/dev/null || wanted+=(iproute2)
command -v iptables >/dev/null || wanted+=(iptables)
command -v faketime >/dev/null || wanted+=(faketime)
command -v openssl >/dev/null || wanted+=(openssl)
command -v kcat >/dev/null || wanted+=(kcat)
if [ ${#wanted[@]} -gt 0 ]; then
    echo "chaos: installing Debian's ${wanted[*]}" >&2
    # A fresh machine has no package lists yet: refresh them once and retry. Another apt
    # or dpkg (unattended-upgrades) holding the lock is waited for, up to 10 minutes.
    if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${wanted[@]}" >/dev/null 2>&1; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${wanted[@]}" >/dev/null
    fi
fi
mkdir -p "$DEST"
touch "$DEST/.installed"
