"""What a listener's security protocol asks of its connections, built once at start-up from
the configuration (Kafka's per-listener `listener.name.<l>.` keys first)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from broker.config import BrokerConfig, ConfigError
from broker.security.jaas import PLAIN_MODULE, JaasError, parse_jaas
from broker.security.sasl import Lookup, SaslSettings
from broker.security.tls import MappingRule, TlsConfigError, TlsSettings, parse_rules


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    tls: ssl.SSLContext | None = None
    sasl: SaslSettings | None = None
    mapping: tuple[MappingRule, ...] = ()


def listener_security(config: BrokerConfig, listener: str, scram: Lookup) -> ListenerSecurity:
    protocol = config.security_protocol(listener)
    tls = _tls(config, listener) if protocol in ("SSL", "SASL_SSL") else None
    sasl = _sasl(config, listener, scram) if protocol.startswith("SASL_") else None
    try:
        rules = parse_rules(str(config.for_listener(listener, "ssl.principal.mapping.rules")))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return ListenerSecurity(protocol, tls, sasl, tuple(rules))


def _tls(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    def get(key: str) -> str:
        return str(config.for_listener(listener, key) or "")

    settings = TlsSettings(
        get("ssl.keystore.location"), get("ssl.key.password"), get("ssl.truststore.location"),
        get("ssl.client.auth"), tuple(p for p in get("ssl.enabled.protocols").split(",") if p),
    )
    try:
        return settings.server_context()
    except TlsConfigError as exc:
        raise ConfigError(f"listener {listener}: cannot use its TLS keys: {exc}") from None


def _sasl(config: BrokerConfig, listener: str, scram: Lookup) -> SaslSettings:
    enabled = str(config.for_listener(listener, "sasl.enabled.mechanisms"))
    mechanisms = tuple(m.strip().upper() for m in enabled.split(",") if m.strip())
    users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        key = f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
        text = str(config.values.get(key) or config.sasl_jaas_config or "")
        try:
            entry = parse_jaas(text) if text else None
        except JaasError as exc:
            raise ConfigError(f"{key}: {exc}") from None
        if entry is None or entry.module != PLAIN_MODULE:
            raise ConfigError(f"{key}: PLAIN on {listener} needs {PLAIN_MODULE} with user_<name> options")
        users = entry.users()
    lifetime = int(config.for_listener(listener, "connections.max.reauth.ms"))
    return SaslSettings(mechanisms, users, scram, lifetime)
