# etcd for the compose cluster: Debian's etcd-server package on a Debian bookworm base.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN set -eu; \
    apt-get update -q; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends etcd-server; \
    rm -rf /var/lib/apt/lists/*; \
    if ! id etcd >/dev/null 2>&1; then useradd --system --user-group --home-dir /var/lib/etcd etcd; fi; \
    mkdir -p /var/lib/etcd/data; \
    chown -R etcd:etcd /var/lib/etcd
USER etcd
VOLUME /var/lib/etcd/data
ENTRYPOINT ["etcd", "--data-dir", "/var/lib/etcd/data"]
