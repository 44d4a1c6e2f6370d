#!/usr/bin/env bash
# A local three-broker Gregor cluster on one etcd (make cluster / make cluster-stop).
# Processes run in the background; their pids and logs are under cluster-data/.
#
# usage: scripts/cluster.sh start|stop VENV ETCD_BINARY
set -euo pipefail

ACTION=${1:?usage: cluster.sh start|stop VENV ETCD_BINARY}
VENV=${2:?usage: cluster.sh start|stop VENV ETCD_BINARY}
ETCD=${3:?usage: cluster.sh start|stop VENV ETCD_BINARY}
DIR=cluster-data

stop() {
    for pidfile in "$DIR"/broker-*.pid "$DIR"/etcd.pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
        rm -f "$pidfile"
    done
    echo "cluster stopped (data kept in $DIR/; delete that directory to start afresh)"
}

wait_port() {
    local port=$1 what=$2
    for _ in $(seq 1 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "$what did not listen on 127.0.0.1:$port; see $DIR/*.log" >&2
    return 1
}

start() {
    mkdir -p "$DIR"
    if [ -f "$DIR/etcd.pid" ] && kill -0 "$(cat "$DIR/etcd.pid")" 2>/dev/null; then
        echo "the cluster is already running (make cluster-stop stops it)" >&2
        exit 1
    fi
    "$ETCD" --name gregor --data-dir "$DIR/etcd" --log-level warn \
        --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster gregor=http://127.0.0.1:2380 >"$DIR/etcd.log" 2>&1 &
    echo $! >"$DIR/etcd.pid"
    wait_port 2379 etcd
    for n in 1 2 3; do
        "$VENV/bin/gregor" broker --config "config/broker-$n.yaml" >"$DIR/broker-$n.log" 2>&1 &
        echo $! >"$DIR/broker-$n.pid"
    done
    for n in 1 2 3; do wait_port "9${n}92" "broker $n"; done
    echo "cluster running: etcd on 127.0.0.1:2379, brokers 1-3"
    echo "bootstrap servers: 127.0.0.1:9192,127.0.0.1:9292,127.0.0.1:9392"
    echo "logs: $DIR/*.log   stop: make cluster-stop"
}

case "$ACTION" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: cluster.sh start|stop VENV ETCD_BINARY" >&2; exit 2 ;;
esac
