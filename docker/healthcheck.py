"""Container health: the broker answers an ApiVersions request on its inter-broker listener
(exit 0), over TLS as the other brokers connect when that listener is SSL or SASL_SSL (its
truststore, its keystore, the host name checked: the certificate names 127.0.0.1). ApiVersions
needs no SASL authentication."""

import os
import socket
import ssl
import struct
import sys

CORRELATION_ID = 0x4752
PREFIX = "GREGOR_OVERRIDE_"


def inter_broker_listener() -> tuple[int, ssl.SSLContext | None]:
    """The inter-broker listener's port in the broker's config, as docker/entrypoint.sh builds
    it, and the brokers' own TLS context for it (None: no TLS)."""
    from pathlib import Path

    from broker.config import load_config
    from broker.security.tls import inter_broker_tls  # stdlib only: a check stays cheap on a busy host

    overrides = [
        f"{env_key(name[len(PREFIX):])}={value}"
        for name, value in os.environ.items() if name.startswith(PREFIX)
    ]
    config = load_config(Path(os.environ.get("GREGOR_CONFIG_FILE", "/etc/gregor/broker.yaml")), overrides)
    return config.listener.port, inter_broker_tls(config)


def env_key(name: str) -> str:
    """GREGOR_OVERRIDE_LOG_DIRS -> log.dirs (`__` is `_`, `___` is `-`)."""
    return name.lower().replace("___", "-").replace("__", "/").replace("_", ".").replace("/", "_")


def api_versions_ok(port: int, tls: ssl.SSLContext | None = None) -> bool:
    client_id = b"healthcheck"
    header = struct.pack(">hhih", 18, 0, CORRELATION_ID, len(client_id)) + client_id
    with socket.create_connection(("127.0.0.1", port), timeout=2) as raw, \
            (tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls is not None else raw) as s:
        s.sendall(struct.pack(">i", len(header)) + header)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        body = recv_exact(s, size)
    correlation_id, error_code = struct.unpack(">ih", body[:6])
    return correlation_id == CORRELATION_ID and error_code == 0


def recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


if __name__ == "__main__":
    try:
        sys.exit(0 if api_versions_ok(*inter_broker_listener()) else 1)
    except (OSError, ValueError) as exc:
        print(f"broker not answering: {exc}", file=sys.stderr)
        sys.exit(1)
