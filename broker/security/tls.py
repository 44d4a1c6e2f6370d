"""TLS on a listener (Python's `ssl`, PEM files as Kafka's `ssl.keystore.type: PEM`), and the
principal a client certificate stands for (Kafka's DEFAULT: the subject's distinguished name in
RFC 2253 form, rewritten by `ssl.principal.mapping.rules`)."""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.config import BrokerConfig

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    """The listener's keystore or truststore cannot be used."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    keystore: str
    key_password: str
    truststore: str
    client_auth: str
    protocols: tuple[str, ...]

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = min((VERSIONS[p] for p in self.protocols), key=lambda v: v.value)
        ctx.maximum_version = max((VERSIONS[p] for p in self.protocols), key=lambda v: v.value)
        try:
            ctx.load_cert_chain(self.keystore, password=self.key_password or None)
            if self.truststore:
                ctx.load_verify_locations(self.truststore)
            elif self.client_auth != "none":
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"{self.keystore}: {getattr(exc, 'strerror', None) or exc}") from None
        ctx.verify_mode = CLIENT_AUTH[self.client_auth]
        return ctx


# -- the principal of a client certificate ----------------------------------------------------

_SHORT = {
    "commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
    "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}


def inter_broker_tls(config: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS this broker connects to the others with (and the container healthcheck, which
    imports only this module and the config's): the inter-broker listener's truststore, its
    keystore as the client certificate, the host checked unless `ssl.endpoint.identification.
    algorithm` is empty; None when that listener has no TLS."""
    listener = config.inter_broker_listener
    if config.security_protocol(listener) not in ("SSL", "SASL_SSL"):
        return None
    ctx = ssl.create_default_context(cafile=config.for_listener(listener, "ssl.truststore.location") or None)
    ctx.check_hostname = str(config.for_listener(listener, "ssl.endpoint.identification.algorithm")) != ""
    keystore = config.for_listener(listener, "ssl.keystore.location")
    if keystore:  # the broker's own certificate, for listeners that ask for one
        ctx.load_cert_chain(keystore, password=config.for_listener(listener, "ssl.key.password") or None)
    return ctx


def _escape(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    return escaped[:-1] + "\\ " if escaped.endswith(" ") else escaped


def distinguished_name(cert: dict[str, Any]) -> str:
    """The subject as Java's X500Principal.getName() writes it (RFC 2253: last RDN first)."""
    rdns = cert.get("subject", ())
    return ",".join(
        "+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn) for rdn in reversed(rdns)
    )


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(?:,|$)")


@dataclass(frozen=True, slots=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        mapped = self.pattern.sub(self.replacement, dn, count=1)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


def parse_rules(text: str) -> list[MappingRule]:
    """`ssl.principal.mapping.rules`; ValueError names what cannot be read."""
    rules: list[MappingRule] = []
    at, text = 0, text.strip()
    while at < len(text):
        m = _RULE.match(text, at)
        if m is None or m.end() == at:
            raise ValueError(f"ssl.principal.mapping.rules: cannot read {text[at:]!r}")
        if m.group(1):
            rules.append(MappingRule(None))
        else:
            pattern = re.compile(m.group(2).replace("\\/", "/"))
            replacement = re.sub(r"\$(\d)", r"\\\1", m.group(3).replace("\\/", "/"))
            rules.append(MappingRule(pattern, replacement, m.group(4)))
        at = m.end()
    return rules or [MappingRule(None)]


def certificate_principal(cert: dict[str, Any] | None, rules: list[MappingRule]) -> str | None:
    """`User:<mapped DN>`; None without a certificate or when no rule applies."""
    if not cert:
        return None
    dn = distinguished_name(cert)
    for rule in rules:
        if (mapped := rule.apply(dn)) is not None:
            return f"User:{mapped}"
    return None
