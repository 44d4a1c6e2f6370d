# The Gregor broker image (docs/cluster.md: "Docker Compose").
#
# BASE is any Debian bookworm-based image: Python's slim image by default; a plain
# Debian image (without Python) gets Debian's python3. The test suite builds this same
# file on a local debootstrap image (scripts/docker-engine.sh).
ARG BASE=python:3.12-slim-bookworm
FROM ${BASE}

# PEM certificates trusted in addition to the base's while pip downloads (a network that
# intercepts TLS); empty: none.
ARG EXTRA_CA_CERTS=""

# Debian's openssl makes the secured cluster's certificates (docker/secure-init.sh); Python's
# image and Debian's ca-certificates already bring it.
RUN set -eu; \
    packages=""; \
    command -v python3 >/dev/null || packages="python3 python3-venv ca-certificates"; \
    command -v openssl >/dev/null || packages="$packages openssl"; \
    if [ -n "$packages" ]; then \
        apt-get update -q; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $packages; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    python3 -m venv /opt/gregor; \
    useradd --system --uid 10001 --user-group --home-dir /var/lib/gregor --shell /usr/sbin/nologin gregor; \
    mkdir -p /var/lib/gregor/data /var/lib/gregor/ca /etc/gregor/secrets; \
    chown -R gregor:gregor /var/lib/gregor /etc/gregor/secrets

# The dependencies and the build backend first (a layer kept while only the sources
# change), then the package itself without the network.
COPY pyproject.toml /src/pyproject.toml
RUN set -eu; \
    if [ -n "$EXTRA_CA_CERTS" ]; then \
        { cat /etc/ssl/certs/ca-certificates.crt; printf '%s\n' "$EXTRA_CA_CERTS"; } > /tmp/ca.pem; \
        export PIP_CERT=/tmp/ca.pem; \
    fi; \
    /opt/gregor/bin/python -c "import tomllib; print('\n'.join(tomllib.load(open('/src/pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt; \
    echo "setuptools>=68" >> /tmp/requirements.txt; \
    /opt/gregor/bin/pip install -q --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt; \
    rm -f /tmp/ca.pem /tmp/requirements.txt
COPY . /src
RUN /opt/gregor/bin/pip install -q --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation /src \
    && rm -rf /src

COPY docker/broker.yaml /etc/gregor/broker.yaml
COPY docker/entrypoint.sh /usr/local/bin/gregor-entrypoint
# The healthcheck docker-compose.yml runs: exit 0 when the broker answers ApiVersions.
COPY docker/healthcheck.py /usr/local/bin/gregor-healthcheck
# docker-compose.secure.yml's `init`: the certificates and the first SCRAM users, once.
COPY docker/secure-init.sh /usr/local/bin/gregor-secure-init

ENV PATH=/opt/gregor/bin:$PATH PYTHONUNBUFFERED=1
USER gregor
WORKDIR /var/lib/gregor
VOLUME /var/lib/gregor/data
EXPOSE 9092
# Exec form: SIGTERM reaches the broker (the entrypoint execs it), which shuts down cleanly.
ENTRYPOINT ["/usr/local/bin/gregor-entrypoint"]
