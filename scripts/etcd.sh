#!/usr/bin/env bash
# Install the etcd server (Debian's etcd-server package, 3.4) without installing
# it system-wide: download the .deb and unpack only the binary into DEST.
# Only Debian's package mirror needs to be reachable.
#
# usage: scripts/etcd.sh DEST_DIR
set -euo pipefail

DEST=$(realpath -m "${1:?usage: etcd.sh DEST_DIR}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cd "$TMP"
echo "etcd: downloading Debian's etcd-server package" >&2
# A fresh machine has no package lists yet: refresh them once and retry (waiting up to
# 10 minutes for another apt holding the lock).
if ! apt-get download -q etcd-server >/dev/null 2>&1; then
    apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
    apt-get download -q etcd-server >/dev/null
fi
dpkg -x etcd-server_*.deb unpacked
mkdir -p "$DEST"
cp unpacked/usr/bin/etcd "$DEST/etcd"
# sed reads all of its input: head would end the pipe early (SIGPIPE under pipefail).
"$DEST/etcd" --version | sed -n 1p >&2
touch "$DEST/.installed"
