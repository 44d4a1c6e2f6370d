"""Certificates for the security tests, made with Debian's openssl: a CA, the broker's key and
certificate (SAN 127.0.0.1 and localhost) in one PEM keystore, a client certificate, and a
second CA with a client certificate of its own (which the broker must refuse)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate (the broker's and the clients' truststore)
    keystore: Path  # the broker's key + certificate
    client_key: Path
    client_cert: Path
    stranger_key: Path  # a client certificate signed by another CA
    stranger_cert: Path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", DAYS, "-subj", f"/CN={name}", cwd=d)


def _signed(d: Path, name: str, subject: str, ca: str, san: str | None = None) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
    extra: list[str] = []
    if san:
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", DAYS, *extra, cwd=d)


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other-ca")
    _signed(d, "broker", "/CN=localhost", "ca", "DNS:localhost,IP:127.0.0.1")
    (d / "broker-keystore.pem").write_text((d / "broker.key").read_text() + (d / "broker.crt").read_text())
    _signed(d, "alice", "/O=Gregor/OU=eng/CN=alice", "ca")
    _signed(d, "mallory", "/CN=mallory", "other-ca")
    return Pki(d / "ca.pem", d / "broker-keystore.pem", d / "alice.key", d / "alice.crt",
               d / "mallory.key", d / "mallory.crt")
