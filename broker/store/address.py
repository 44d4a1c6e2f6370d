"""Where the etcd metadata store is: `etcd://host:port[,host:port...][/root]`."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_ROOT = "/gregor"


@dataclass(frozen=True, slots=True)
class EtcdAddress:
    endpoints: tuple[tuple[str, int], ...]
    root: str

    @classmethod
    def parse(cls, url: str) -> EtcdAddress:
        """`etcd://host:port[,host:port...][/root]`."""
        parts = urlsplit(url)
        if parts.scheme != "etcd" or not parts.netloc:
            raise ValueError(f"expected etcd://host:port[,host:port...][/root], got {url!r}")
        endpoints = tuple(_host_port(e) for e in parts.netloc.split(","))
        root = parts.path.rstrip("/") or DEFAULT_ROOT
        return cls(endpoints, root)


def _host_port(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"etcd endpoint {endpoint!r} is not host:port")
    return host, int(port)
