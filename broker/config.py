"""Broker configuration: YAML with Kafka's property names, validated at start-up."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast
from urllib.parse import ParseResult, urlparse

import yaml

from broker.store.address import EtcdAddress
from storage.log_config import MAX_DECOMPRESSED

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MIN = -(2**63)


class ConfigError(ValueError):
    """A configuration key or value that stops start-up."""


# -- value types: each parses a YAML or --override value and says what it expects ----


@dataclass(frozen=True)
class Integer:
    minimum: int
    maximum: int = INT_MAX

    @property
    def expected(self) -> str:
        if self.maximum in (INT_MAX, LONG_MAX):
            return f"an integer \u2265 {self.minimum}"
        return f"an integer from {self.minimum} to {self.maximum}"

    def __call__(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(self.expected)
        try:
            number = int(str(value).strip().replace("_", ""))
        except ValueError:
            raise ValueError(self.expected) from None
        if not self.minimum <= number <= self.maximum:
            raise ValueError(self.expected + ("" if number < self.minimum else f" and \u2264 {self.maximum}"))
        return number


def _long(minimum: int) -> Integer:
    return Integer(minimum, LONG_MAX)


@dataclass(frozen=True)
class Double:
    minimum: float
    maximum: float = float("inf")

    @property
    def expected(self) -> str:
        if self.maximum == float("inf"):
            return f"a number \u2265 {self.minimum:g}"
        return f"a number from {self.minimum:g} to {self.maximum:g}"

    def __call__(self, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(self.expected)
        try:
            number = float(str(value).strip())
        except ValueError:
            raise ValueError(self.expected) from None
        if not self.minimum <= number <= self.maximum:
            raise ValueError(self.expected)
        return number


@dataclass(frozen=True)
class Boolean:
    expected: str = "true or false"

    def __call__(self, value: object) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if isinstance(value, str) and text in ("true", "false"):
            return text == "true"
        raise ValueError(self.expected)


@dataclass(frozen=True)
class Text:
    expected: str = "a string"

    def __call__(self, value: object) -> str:
        if isinstance(value, (list, dict)) or value is None:
            raise ValueError(self.expected)
        return str(value)


@dataclass(frozen=True)
class Choice:
    choices: tuple[str, ...]

    @property
    def expected(self) -> str:
        return "one of " + ", ".join(self.choices)

    def __call__(self, value: object) -> str:
        if str(value) not in self.choices or isinstance(value, bool):
            raise ValueError(self.expected)
        return str(value)


def _items(value: object) -> list[str] | None:
    """The items of a Kafka LIST value: a comma-separated string or a YAML list of
    strings; None when it is neither."""
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return [str(v).strip() for v in value if str(v).strip()]
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return None


@dataclass(frozen=True)
class ChoiceList:
    choices: tuple[str, ...]

    @property
    def expected(self) -> str:
        return "a comma-separated list of " + ", ".join(self.choices)

    def __call__(self, value: object) -> str:
        items = _items(value)
        if not items or any(v not in self.choices for v in items):
            raise ValueError(self.expected)
        return ",".join(items)


@dataclass(frozen=True)
class Dirs:
    expected: str = "one or more directories (comma-separated, or a YAML list)"

    def __call__(self, value: object) -> str:
        items = _items(value)
        if not items:
            raise ValueError(self.expected)
        return ",".join(items)


@dataclass(frozen=True)
class Listeners:
    """Named listeners, `NAME://host:port`, comma-separated or a YAML list, each name once.
    The names' protocols come from `listener.security.protocol.map` (checked across keys)."""

    optional: bool = False
    expected: str = "listeners of the form NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092"

    def __call__(self, value: object) -> str:
        items = _items(value)
        if items is None or (not items and not self.optional):
            raise ValueError(self.expected)
        names: set[str] = set()
        for item in items:
            problem = listener_problem(item)
            if problem:
                raise ValueError(self.expected, problem)
            name = listener_name(item)
            if name in names:
                raise ValueError(self.expected, f"listener {name} named twice")
            names.add(name)
        return ",".join(items)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class ProtocolMap:
    """`NAME:PROTOCOL` pairs, PROTOCOL one of Kafka's security protocols."""

    expected: str = "NAME:PROTOCOL pairs, comma-separated (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"

    def __call__(self, value: object) -> str:
        items = _items(value)
        if not items:
            raise ValueError(self.expected)
        for item in items:
            name, sep, protocol = item.partition(":")
            if not sep or not _LISTENER_NAME.fullmatch(name):
                raise ValueError(self.expected, f"{item!r} is not NAME:PROTOCOL")
            if protocol.upper() not in SECURITY_PROTOCOLS:
                raise ValueError(self.expected, f"{protocol.upper()} is not a security protocol")
        return ",".join(items)


@dataclass(frozen=True)
class HttpListener:
    """Empty (off) or `http://host:port`: where Prometheus scrapes the metrics."""

    expected: str = "empty (no endpoint) or http://host:port"

    def __call__(self, value: object) -> str:
        text = Text()(value).strip()
        if not text:
            return ""
        problem = http_listener_problem(text)
        if problem:
            raise ValueError(self.expected, problem)
        return text


@dataclass(frozen=True)
class IpOverrides:
    """`host:count` pairs (Kafka's `max.connections.per.ip.overrides`), comma-separated."""

    expected: str = "host:count pairs, comma-separated (e.g. 127.0.0.1:200,client-host:50)"

    def __call__(self, value: object) -> str:
        items = _items(value)
        if items is None:
            raise ValueError(self.expected)
        for item in items:
            host, sep, count = item.rpartition(":")
            if not sep or not host.strip() or not count.strip().isdigit():
                raise ValueError(self.expected, f"{item!r} is not host:count")
        return ",".join(items)


def ip_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides` as host -> count."""
    pairs = (item.rpartition(":") for item in filter(None, (i.strip() for i in text.split(","))))
    return {host.strip().strip("[]"): int(count) for host, _, count in pairs}


@dataclass(frozen=True)
class StoreAddress:
    expected: str = "local or etcd://host:port[,host:port...][/root]"

    def __call__(self, value: object) -> str:
        text = Text()(value)
        if text == "local":
            return text
        try:
            EtcdAddress.parse(text)
        except ValueError as exc:
            raise ValueError(self.expected, str(exc)) from None
        return text


@dataclass(frozen=True)
class Key:
    parse: Callable[[object], object]  # a raw value (YAML, properties, a client's string) to its typed one
    default: object
    doc: str = ""


# Older names kept for tables elsewhere that still use them.
_int = Integer(INT_MIN, LONG_MAX)
_bool = Boolean()
_str = Text()
_dirs = Dirs()

_POSITIVE = Integer(1)
_POSITIVE_LONG = _long(1)
_NON_NEGATIVE = Integer(0)
_NON_NEGATIVE_LONG = _long(0)

# The one table of broker keys: type and valid range (Kafka's), default, meaning.
# docs/configuration.md's key table is generated from it (`gregor config-docs`).
KEYS: dict[str, Key] = {
    "node.id": Key(_NON_NEGATIVE, 1, "This broker's id; must match `meta.properties` in the log dirs."),
    "listeners": Key(Listeners(), "PLAINTEXT://127.0.0.1:9092",
                     "Where the broker listens: `NAME://host:port`, one or more (e.g. one for other "
                     "containers, one for the host)."),
    "advertised.listeners": Key(Listeners(optional=True), "",
                                "The addresses clients are told to connect to, by listener name: a client "
                                "gets the brokers' addresses of the listener it connected to; empty: "
                                "`listeners`."),
    "listener.security.protocol.map": Key(ProtocolMap(), "PLAINTEXT:PLAINTEXT",
                                          "Each listener name's protocol (`NAME:PLAINTEXT`; a listener "
                                          "named PLAINTEXT needs no entry)."),
    "inter.broker.listener.name": Key(Text(), "", "The listener other brokers connect to (replication, "
                                      "forwarding, markers); empty: the first of `listeners`."),
    "log.dirs": Key(Dirs(), "./data", "Data directories (comma-separated or a YAML list); each is locked "
                    "by one broker at a time (`.lock`)."),
    "log.dir": Key(Dirs(), "", "Used when `log.dirs` is not set (Kafka's precedence)."),
    "cluster.id": Key(Text(), "", "Cluster id written to `meta.properties`; empty: the one found there, "
                      "or a new random one."),
    "num.partitions": Key(_POSITIVE, 1, "Partitions of an auto-created topic."),
    "default.replication.factor": Key(_POSITIVE, 1, "Replication factor of an auto-created topic."),
    "max.partitions": Key(_POSITIVE, 10000, "Most partitions of all topics together (internal topics "
                           "exempt); a request for more gets POLICY_VIOLATION."),
    "min.insync.replicas": Key(_POSITIVE, 1, "Replicas that must have a record before `acks=all` is "
                               "answered."),
    "auto.create.topics.enable": Key(Boolean(), True, "Create a topic when a client asks for metadata "
                                     "of (or produces to) one that does not exist."),
    "delete.topic.enable": Key(Boolean(), True, "Allow DeleteTopics."),
    "message.max.bytes": Key(_NON_NEGATIVE, 1048588, "Largest record batch accepted (topic: "
                             "`max.message.bytes`)."),
    "max.decompressed.message.bytes": Key(Integer(1, MAX_DECOMPRESSED), MAX_DECOMPRESSED,
                                          "Largest record, decompressed, accepted in a compressed "
                                          "batch: INVALID_RECORD beyond (Kafka 4.4; topic: same name)."),
    "socket.request.max.bytes": Key(_POSITIVE, 104857600, "Largest request frame; a larger one closes "
                                    "the connection."),
    "log.segment.bytes": Key(Integer(14), 1073741824, "Size at which a segment is rolled (topic: "
                             "`segment.bytes`)."),
    "log.roll.ms": Key(_POSITIVE_LONG, 604800000, "Age at which a segment is rolled (topic: "
                       "`segment.ms`)."),
    "log.roll.hours": Key(_POSITIVE, 168, "Same in hours, used when `log.roll.ms` is not set."),
    "log.retention.ms": Key(_long(-1), 604800000, "How long records are kept; -1: forever (topic: "
                            "`retention.ms`)."),
    "log.retention.minutes": Key(Integer(-1), 10080, "Same in minutes, used when `log.retention.ms` is "
                                 "not set."),
    "log.retention.hours": Key(Integer(-1), 168, "Same in hours, used when neither of the above is set."),
    "log.retention.bytes": Key(_long(-1), -1, "Largest size of a partition before old segments are "
                               "deleted; -1: no limit (topic: `retention.bytes`)."),
    "log.retention.check.interval.ms": Key(_POSITIVE_LONG, 300000, "How often retention is applied."),
    "log.index.interval.bytes": Key(_NON_NEGATIVE, 4096, "Bytes of log between two offset-index entries."),
    "log.segment.delete.delay.ms": Key(_NON_NEGATIVE_LONG, 60000, "Delay before a deleted segment's "
                                       "files are removed (topic: `file.delete.delay.ms`)."),
    "log.flush.interval.messages": Key(_POSITIVE_LONG, LONG_MAX, "fsync after this many messages; the "
                                       "default leaves flushing to the OS (topic: `flush.messages`)."),
    "log.flush.interval.ms": Key(_NON_NEGATIVE_LONG, LONG_MAX, "fsync at most this long after an append "
                                 "(topic: `flush.ms`)."),
    "log.flush.scheduler.interval.ms": Key(_POSITIVE_LONG, 1000, "How often time-based flushes are "
                                           "checked."),
    "log.flush.offset.checkpoint.interval.ms": Key(Integer(0), 60000, "How often the recovery-point, "
                                                   "log-start and high-watermark checkpoints are written."),
    "log.message.timestamp.before.max.ms": Key(_NON_NEGATIVE_LONG, LONG_MAX, "How far in the past a "
                                               "record's CreateTime may be (topic: "
                                               "`message.timestamp.before.max.ms`); older: "
                                               "INVALID_TIMESTAMP."),
    "log.message.timestamp.after.max.ms": Key(_NON_NEGATIVE_LONG, LONG_MAX, "How far in the future a "
                                              "record's CreateTime may be (topic: "
                                              "`message.timestamp.after.max.ms`)."),
    "log.message.timestamp.difference.max.ms": Key(_NON_NEGATIVE_LONG, LONG_MAX, "Deprecated: stands in for "
                                                   "either of the two above when they are not set."),
    "log.message.timestamp.type": Key(Choice(("CreateTime", "LogAppendTime")), "CreateTime",
                                      "Timestamp kept in stored batches (topic: "
                                      "`message.timestamp.type`)."),
    "log.cleanup.policy": Key(ChoiceList(("delete", "compact")), "delete",
                              "Default `cleanup.policy` of topics (`compact`, `delete` or both; the "
                              "internal topics are always `compact`)."),
    "log.cleaner.enable": Key(Boolean(), True, "Run the log cleaner (compaction of `compact` topics)."),
    "log.cleaner.backoff.ms": Key(_NON_NEGATIVE_LONG, 15000, "How long the cleaner sleeps when no log "
                                  "needs cleaning."),
    "log.cleaner.io.max.bytes.per.second": Key(Double(1), 1.7976931348623157e308, "Bound on the "
                                               "cleaner's reads plus writes."),
    "log.cleaner.dedupe.buffer.size": Key(_long(1), 134217728, "Memory for the cleaner's key map "
                                          "(an entry costs about 128 bytes here)."),
    "log.cleaner.io.buffer.load.factor": Key(Double(0.01, 1), 0.9, "Share of the key map filled "
                                             "before a pass stops early."),
    "log.cleaner.min.cleanable.ratio": Key(Double(0, 1), 0.5, "Dirty share of a log above which it is "
                                           "cleaned (topic: `min.cleanable.dirty.ratio`)."),
    "log.cleaner.delete.retention.ms": Key(_NON_NEGATIVE_LONG, 86400000, "How long tombstones and "
                                           "removable transaction markers stay after the cleaner first "
                                           "sees them (topic: `delete.retention.ms`)."),
    "log.cleaner.min.compaction.lag.ms": Key(_NON_NEGATIVE_LONG, 0, "Records younger than this are not "
                                             "cleaned (topic: `min.compaction.lag.ms`)."),
    "log.cleaner.max.compaction.lag.ms": Key(_POSITIVE_LONG, LONG_MAX, "A log with dirty records older "
                                             "than this is cleaned whatever its dirty ratio (topic: "
                                             "`max.compaction.lag.ms`)."),
    "compression.type": Key(Choice(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
                            "producer", "Default `compression.type` of topics."),
    "offsets.topic.num.partitions": Key(_POSITIVE, 50, "Partitions of `__consumer_offsets` (fixed once "
                                        "it exists)."),
    "offsets.topic.replication.factor": Key(Integer(1, 32767), 1, "Replication factor of "
                                            "`__consumer_offsets`."),
    "offsets.topic.segment.bytes": Key(Integer(14), 104857600, "`segment.bytes` of "
                                       "`__consumer_offsets` (small segments are cleaned sooner)."),
    "offsets.retention.minutes": Key(_POSITIVE, 10080, "How long the committed offsets of an empty "
                                     "group are kept."),
    "offsets.retention.check.interval.ms": Key(_POSITIVE_LONG, 600000, "How often expired offsets are "
                                               "removed."),
    "offsets.commit.timeout.ms": Key(_POSITIVE, 5000, "How long a group coordinator write may wait to "
                                     "be replicated before the request fails (COORDINATOR_NOT_AVAILABLE)."),
    "offset.metadata.max.bytes": Key(_NON_NEGATIVE, 4096, "Largest metadata string of a committed offset."),
    "group.min.session.timeout.ms": Key(_NON_NEGATIVE, 6000, "Smallest session timeout a consumer may "
                                        "ask for."),
    "group.max.session.timeout.ms": Key(_NON_NEGATIVE, 1800000, "Largest session timeout a consumer may "
                                        "ask for."),
    "group.initial.rebalance.delay.ms": Key(_NON_NEGATIVE, 3000, "How long the first rebalance of an "
                                            "empty group waits for more members."),
    "group.max.size": Key(_POSITIVE, 2147483647, "Most members of one consumer group."),
    "group.consumer.heartbeat.interval.ms": Key(_POSITIVE, 5000, "Heartbeat interval the coordinator "
                                                "gives members of consumer-protocol groups (KIP-848)."),
    "group.consumer.min.heartbeat.interval.ms": Key(_POSITIVE, 5000, "Smallest allowed "
                                                    "`group.consumer.heartbeat.interval.ms`."),
    "group.consumer.max.heartbeat.interval.ms": Key(_POSITIVE, 15000, "Largest allowed "
                                                    "`group.consumer.heartbeat.interval.ms`."),
    "group.consumer.session.timeout.ms": Key(_POSITIVE, 45000, "How long a consumer-protocol member "
                                             "may go without a heartbeat before it is fenced."),
    "group.consumer.min.session.timeout.ms": Key(_POSITIVE, 45000, "Smallest allowed "
                                                 "`group.consumer.session.timeout.ms`."),
    "group.consumer.max.session.timeout.ms": Key(_POSITIVE, 60000, "Largest allowed "
                                                 "`group.consumer.session.timeout.ms`."),
    "group.consumer.max.size": Key(_POSITIVE, 2147483647, "Most members of one consumer-protocol group."),
    "group.consumer.assignment.interval.ms": Key(_NON_NEGATIVE, 1000, "Least time between two target "
                                                 "assignments of a consumer-protocol group (KIP-1263)."),
    "group.consumer.min.assignment.interval.ms": Key(_NON_NEGATIVE, 0, "Smallest allowed "
                                                     "`group.consumer.assignment.interval.ms`."),
    "group.consumer.max.assignment.interval.ms": Key(_NON_NEGATIVE, 15000, "Largest allowed "
                                                     "`group.consumer.assignment.interval.ms`."),
    "group.consumer.assignors": Key(ChoiceList(("uniform", "range")), "uniform,range", "Server-side "
                                    "assignors of consumer-protocol groups; the first is the default."),
    "group.consumer.migration.policy": Key(
        Choice(("disabled", "upgrade", "downgrade", "bidirectional")), "bidirectional",
        "Which online conversions of a live group between the classic and the consumer protocol "
        "are allowed: disabled, upgrade, downgrade or bidirectional."),
    "transaction.state.log.num.partitions": Key(_POSITIVE, 50, "Partitions of `__transaction_state` "
                                                "(fixed once it exists)."),
    "transaction.state.log.replication.factor": Key(Integer(1, 32767), 1, "Replication factor of "
                                                    "`__transaction_state`."),
    "transaction.state.log.segment.bytes": Key(Integer(14), 104857600, "`segment.bytes` of "
                                               "`__transaction_state`."),
    "transaction.state.log.min.isr": Key(_POSITIVE, 1, "`min.insync.replicas` of `__transaction_state`."),
    "transaction.version": Key(Integer(1, 2), 2, "Finalized `transaction.version` advertised in "
                               "ApiVersions: 2 (KIP-890 part 2) or 1 (the older protocol)."),
    "transaction.partition.verification.enable": Key(Boolean(), True, "Check a producer's first "
                                                      "transactional batch for a partition with its "
                                                      "transaction coordinator before appending it "
                                                      "(KIP-890)."),
    "transaction.max.timeout.ms": Key(_POSITIVE, 900000, "Largest transaction timeout a producer may "
                                      "ask for."),
    "request.timeout.ms": Key(_POSITIVE, 30000, "How long a transaction coordinator write may wait to "
                              "be replicated before the request fails (COORDINATOR_NOT_AVAILABLE)."),
    "transaction.completion.wait.ms": Key(_POSITIVE, 5000, "How long a request for a transactional "
                                          "id whose previous transaction is still completing waits for "
                                          "the completion (Gregor's own; Kafka answers "
                                          "CONCURRENT_TRANSACTIONS at once): then it is answered so."),
    "transactional.id.expiration.ms": Key(_POSITIVE, 604800000, "How long an idle transactional id is "
                                          "kept."),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": Key(
        _POSITIVE, 10000, "How often transactions older than their timeout are aborted."),
    "producer.id.expiration.ms": Key(_POSITIVE, 86400000, "How long the state of an idle producer id "
                                     "is kept in each partition."),
    "replica.lag.time.max.ms": Key(_POSITIVE_LONG, 30000, "How long a follower may fail to catch up "
                                   "before it leaves the ISR (cluster mode)."),
    "replica.fetch.wait.max.ms": Key(_NON_NEGATIVE, 500, "How long a follower's fetch waits at its "
                                     "leader for new records; at most `replica.lag.time.max.ms`."),
    "metadata.store": Key(StoreAddress(), "local", "Where cluster metadata lives: `local` (a file in the "
                          "first log dir) or etcd (cluster mode)."),
    "broker.rack": Key(Text(), "", "This broker's rack, for rack-aware replica placement."),
    "auto.leader.rebalance.enable": Key(Boolean(), True, "The controller moves leadership back to "
                                        "each partition's preferred (first) replica once it is in the "
                                        "ISR again, every `leader.imbalance.check.interval.seconds` "
                                        "(cluster mode)."),
    "leader.imbalance.check.interval.seconds": Key(_POSITIVE_LONG, 300, "How often the controller "
                                                   "looks for partitions not led by their preferred "
                                                   "replica."),
    "leader.imbalance.per.broker.percentage": Key(_NON_NEGATIVE, 10, "Accepted as Kafka's; as "
                                                  "Kafka's KRaft controller, Gregor's ignores it and "
                                                  "rebalances every imbalanced partition."),
    "broker.session.timeout.ms": Key(_POSITIVE, 9000, "Lease of this broker's registration in etcd: "
                                     "after it, the broker counts as gone."),
    "metadata.store.connect.attempts": Key(_POSITIVE, 30, "etcd connection attempts at start-up, 1 s "
                                           "apart; as many registration attempts after recovery."),
    "metrics.listener": Key(HttpListener(), "", "Where the Prometheus endpoint listens "
                            "(`http://host:port`, path `/metrics`); empty: no endpoint."),
    "transaction.hanging.check.interval.ms": Key(_POSITIVE_LONG, 60000, "How often the partitions this "
                                                 "broker leads are searched for hanging transactions."),
    "transaction.hanging.margin.ms": Key(_NON_NEGATIVE_LONG, 60000, "A transaction open on a partition "
                                         "for longer than `transaction.max.timeout.ms` plus this, that "
                                         "no coordinator knows, is hanging."),
    "authorizer.class.name": Key(Choice(("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")), "",
                                 "Empty: every request is allowed. Kafka's StandardAuthorizer: requests "
                                 "are checked against the ACLs in the metadata store."),
    "super.users": Key(Text(), "", "Principals allowed everything whatever the ACLs, separated by "
                       "semicolons (`User:admin;User:ANONYMOUS`)."),
    "allow.everyone.if.no.acl.found": Key(Boolean(), False, "With the authorizer: a resource no ACL "
                                          "names is open to everyone (else only to super users)."),
    "ssl.keystore.type": Key(Choice(("PEM",)), "PEM", "The keystore's format: PEM (Kafka's other "
                             "formats, JKS and PKCS12, are Java's)."),
    "ssl.keystore.location": Key(Text(), "", "PEM file with the listener's private key and its "
                                 "certificate chain (SSL and SASL_SSL listeners)."),
    "ssl.key.password": Key(Text(), "", "The password of an encrypted private key."),
    "ssl.truststore.type": Key(Choice(("PEM",)), "PEM", "The truststore's format: PEM."),
    "ssl.truststore.location": Key(Text(), "", "PEM file with the CA certificates that client "
                                   "certificates are checked against; empty: the system's."),
    "ssl.client.auth": Key(Choice(("none", "requested", "required")), "none", "Client certificates: "
                           "not asked for, asked for, or required (mTLS)."),
    "ssl.enabled.protocols": Key(ChoiceList(("TLSv1.2", "TLSv1.3")), "TLSv1.2,TLSv1.3",
                                 "TLS versions the listeners accept."),
    "ssl.principal.mapping.rules": Key(Text(), "DEFAULT", "How a client certificate's distinguished "
                                       "name becomes the principal: `RULE:pattern/replacement/[LU]` "
                                       "rules and `DEFAULT` (the DN itself), comma-separated."),
    "sasl.enabled.mechanisms": Key(Text(), "GSSAPI", "SASL mechanisms served on SASL listeners: PLAIN, "
                                   "SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default, GSSAPI, is not "
                                   "served: set this on a broker with a SASL listener)."),
    "sasl.jaas.config": Key(Text(), "", "JAAS login module entry; on a broker, PlainLoginModule's "
                            "`user_<name>=\"<password>\"` options are PLAIN's users. Usually set per "
                            "listener and mechanism: `listener.name.<l>.plain.sasl.jaas.config`."),
    "sasl.mechanism.inter.broker.protocol": Key(Text(), "GSSAPI", "The SASL mechanism brokers use with "
                                                "each other when the inter-broker listener is SASL; "
                                                "its credentials are the username and password of that "
                                                "listener's JAAS entry for the mechanism."),
    "ssl.endpoint.identification.algorithm": Key(Choice(("https", "")), "https", "https: a broker "
                                                 "checks the other brokers' certificates name their host; "
                                                 "empty: it does not."),
    "connections.max.reauth.ms": Key(_long(0), 0, "Lifetime of a SASL session (KIP-368): a client "
                                     "re-authenticates before it ends; past it a connection is "
                                     "served nothing but a re-authentication. 0: sessions never end."),
    "connection.failed.authentication.delay.ms": Key(_long(0), 100, "How long the answer to a "
                                                     "failed authentication (and the close after it) "
                                                     "waits, to slow down password guessing."),
    "max.connections": Key(_NON_NEGATIVE, INT_MAX, "Most client connections open at once; the next one "
                           "waits unaccepted until one closes (Kafka's acceptor blocks). Per listener: "
                           "`listener.name.<l>.max.connections` (default this); with several listeners "
                           "the inter-broker one is held only to its own limit."),
    "max.connections.per.ip": Key(_NON_NEGATIVE, INT_MAX, "Most connections open at once from one IP "
                                  "address; a new one beyond it is closed as soon as it is accepted. "
                                  "0 only with `max.connections.per.ip.overrides`."),
    "max.connections.per.ip.overrides": Key(IpOverrides(), "", "Per-IP (or host name) exceptions to "
                                            "`max.connections.per.ip`: `host:count` pairs, "
                                            "comma-separated, e.g. `127.0.0.1:200,client-host:50`."),
    "max.connection.creation.rate": Key(_NON_NEGATIVE, INT_MAX, "Most new connections accepted per "
                                        "second (Kafka's rate over 11 one-second windows); a faster one "
                                        "waits before it is accepted, at most 1 s each. Per listener: "
                                        "`listener.name.<l>.max.connection.creation.rate`."),
    "sasl.server.max.receive.size": Key(_POSITIVE, 524288, "Largest frame accepted before a SASL "
                                        "connection is authenticated."),
    "transaction.hanging.auto.abort.enable": Key(Boolean(), False, "Abort hanging transactions found "
                                                 "(an ABORT marker, as `gregor transactions abort`); "
                                                 "otherwise only report them."),
}

# Kafka keys Gregor does not implement yet: refused with the reason rather than accepted and
# ignored (docs/configuration.md lists them below the key table).
RESERVED: dict[str, str] = {}


@dataclass(frozen=True)
class Listener:
    host: str
    port: int


Value = TypeVar("Value", int, float, bool, str)


class Setting(Generic[Value]):
    """One key's typed getter, as Kafka's KafkaConfig has one per key: the value `build_config`
    parsed (and checked) for the key, read as the type its parser gives."""

    def __init__(self, key: str, kind: type[Value]) -> None:
        self.key = key
        self.kind: type[Value] = kind

    def __get__(self, config: BrokerConfig, owner: type[BrokerConfig] | None = None) -> Value:
        return cast(Value, config.values[self.key])


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's configuration: a typed getter per key the code reads (below), and the
    listeners, log dirs and per-listener keys derived from them."""

    values: Mapping[str, Any]
    explicit: Mapping[str, Any]  # only the keys the file or overrides set

    allow_everyone_if_no_acl_found = Setting("allow.everyone.if.no.acl.found", bool)
    authorizer_class_name = Setting("authorizer.class.name", str)
    auto_create_topics_enable = Setting("auto.create.topics.enable", bool)
    auto_leader_rebalance_enable = Setting("auto.leader.rebalance.enable", bool)
    broker_rack = Setting("broker.rack", str)
    broker_session_timeout_ms = Setting("broker.session.timeout.ms", int)
    cluster_id = Setting("cluster.id", str)
    connection_failed_authentication_delay_ms = Setting("connection.failed.authentication.delay.ms", int)
    default_replication_factor = Setting("default.replication.factor", int)
    delete_topic_enable = Setting("delete.topic.enable", bool)
    group_consumer_assignment_interval_ms = Setting("group.consumer.assignment.interval.ms", int)
    group_consumer_assignors = Setting("group.consumer.assignors", str)
    group_consumer_heartbeat_interval_ms = Setting("group.consumer.heartbeat.interval.ms", int)
    group_consumer_max_size = Setting("group.consumer.max.size", int)
    group_consumer_migration_policy = Setting("group.consumer.migration.policy", str)
    group_consumer_session_timeout_ms = Setting("group.consumer.session.timeout.ms", int)
    group_initial_rebalance_delay_ms = Setting("group.initial.rebalance.delay.ms", int)
    group_max_session_timeout_ms = Setting("group.max.session.timeout.ms", int)
    group_max_size = Setting("group.max.size", int)
    group_min_session_timeout_ms = Setting("group.min.session.timeout.ms", int)
    leader_imbalance_check_interval_seconds = Setting("leader.imbalance.check.interval.seconds", int)
    listener_security_protocol_map = Setting("listener.security.protocol.map", str)
    log_cleaner_backoff_ms = Setting("log.cleaner.backoff.ms", int)
    log_cleaner_dedupe_buffer_size = Setting("log.cleaner.dedupe.buffer.size", int)
    log_cleaner_enable = Setting("log.cleaner.enable", bool)
    log_cleaner_io_buffer_load_factor = Setting("log.cleaner.io.buffer.load.factor", float)
    log_cleaner_io_max_bytes_per_second = Setting("log.cleaner.io.max.bytes.per.second", float)
    log_flush_offset_checkpoint_interval_ms = Setting("log.flush.offset.checkpoint.interval.ms", int)
    log_flush_scheduler_interval_ms = Setting("log.flush.scheduler.interval.ms", int)
    log_retention_check_interval_ms = Setting("log.retention.check.interval.ms", int)
    max_connection_creation_rate = Setting("max.connection.creation.rate", int)
    max_connections = Setting("max.connections", int)
    max_connections_per_ip = Setting("max.connections.per.ip", int)
    max_connections_per_ip_overrides = Setting("max.connections.per.ip.overrides", str)
    max_partitions = Setting("max.partitions", int)
    metadata_store = Setting("metadata.store", str)
    metadata_store_connect_attempts = Setting("metadata.store.connect.attempts", int)
    metrics_listener = Setting("metrics.listener", str)
    num_partitions = Setting("num.partitions", int)
    offset_metadata_max_bytes = Setting("offset.metadata.max.bytes", int)
    offsets_commit_timeout_ms = Setting("offsets.commit.timeout.ms", int)
    offsets_retention_check_interval_ms = Setting("offsets.retention.check.interval.ms", int)
    offsets_retention_minutes = Setting("offsets.retention.minutes", int)
    offsets_topic_num_partitions = Setting("offsets.topic.num.partitions", int)
    offsets_topic_replication_factor = Setting("offsets.topic.replication.factor", int)
    offsets_topic_segment_bytes = Setting("offsets.topic.segment.bytes", int)
    replica_fetch_wait_max_ms = Setting("replica.fetch.wait.max.ms", int)
    replica_lag_time_max_ms = Setting("replica.lag.time.max.ms", int)
    request_timeout_ms = Setting("request.timeout.ms", int)
    sasl_jaas_config = Setting("sasl.jaas.config", str)
    sasl_mechanism_inter_broker_protocol = Setting("sasl.mechanism.inter.broker.protocol", str)
    socket_request_max_bytes = Setting("socket.request.max.bytes", int)
    super_users = Setting("super.users", str)
    transaction_abort_timed_out_transaction_cleanup_interval_ms = Setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", int,
    )
    transaction_completion_wait_ms = Setting("transaction.completion.wait.ms", int)
    transaction_hanging_auto_abort_enable = Setting("transaction.hanging.auto.abort.enable", bool)
    transaction_hanging_check_interval_ms = Setting("transaction.hanging.check.interval.ms", int)
    transaction_hanging_margin_ms = Setting("transaction.hanging.margin.ms", int)
    transaction_max_timeout_ms = Setting("transaction.max.timeout.ms", int)
    transaction_partition_verification_enable = Setting("transaction.partition.verification.enable", bool)
    transaction_state_log_min_isr = Setting("transaction.state.log.min.isr", int)
    transaction_state_log_num_partitions = Setting("transaction.state.log.num.partitions", int)
    transaction_state_log_replication_factor = Setting("transaction.state.log.replication.factor", int)
    transaction_state_log_segment_bytes = Setting("transaction.state.log.segment.bytes", int)
    transaction_version = Setting("transaction.version", int)
    transactional_id_expiration_ms = Setting("transactional.id.expiration.ms", int)

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def log_dirs(self) -> list[Path]:
        """`log.dirs`, or `log.dir` when only that is set (Kafka's precedence)."""
        use_dir = "log.dirs" not in self.explicit and self.values["log.dir"]
        raw = self.values["log.dir"] if use_dir else self.values["log.dirs"]
        return [Path(p.strip()) for p in str(raw).split(",") if p.strip()]

    @property
    def listeners(self) -> dict[str, Listener]:
        """Where the broker listens, by listener name, in the order configured."""
        return parse_listeners("listeners", self.values["listeners"])

    @property
    def advertised_listeners(self) -> dict[str, Listener]:
        raw = self.values["advertised.listeners"]
        return parse_listeners("advertised.listeners", raw) if raw else self.listeners

    @property
    def inter_broker_listener(self) -> str:
        return str(self.values["inter.broker.listener.name"]).upper() or next(iter(self.listeners))

    def security_protocol(self, listener: str) -> str:
        """The listener's protocol from `listener.security.protocol.map` (PLAINTEXT if unmapped)."""
        for item in str(self.values["listener.security.protocol.map"]).split(","):
            name, _, protocol = item.partition(":")
            if name.strip().upper() == listener:
                return protocol.strip().upper()
        return listener if listener in SECURITY_PROTOCOLS else "PLAINTEXT"  # Kafka: a name is its protocol

    def for_listener(self, listener: str, key: str) -> Any:  # Any: the value's type is the key's
        """`listener.name.<listener>.<key>` when set, else `key` (Kafka's per-listener override).
        Any key may be overridden, so the value has the type of `key` (str, int, a list), which
        the caller knows: the typed getters cover the keys that have no override."""
        return self.values.get(f"{LISTENER_PREFIX}{listener.lower()}.{key}", self.values.get(key))

    def max_connections_on(self, listener: str) -> int:
        """`listener.name.<listener>.max.connections`, else `max.connections` (Kafka's listener limit)."""
        return int(self.for_listener(listener, "max.connections"))

    def max_connection_creation_rate_on(self, listener: str) -> int:
        """`listener.name.<listener>.max.connection.creation.rate`, else the broker's."""
        return int(self.for_listener(listener, "max.connection.creation.rate"))

    @property
    def listener(self) -> Listener:
        """The inter-broker listener."""
        return self.listeners[self.inter_broker_listener]

    @property
    def advertised(self) -> Listener:
        """The inter-broker listener's advertised address (what the broker registers)."""
        return self.advertised_listeners[self.inter_broker_listener]


_LISTENER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def listener_name(text: str) -> str:
    return text.split("://", 1)[0].upper()


def listener_problem(text: str) -> str | None:
    """What is wrong with one listener string, or None."""
    if "://" not in text:
        return f"no listener name: write PLAINTEXT://{text}"
    if not _LISTENER_NAME.fullmatch(text.split("://", 1)[0]):
        return f"{text.split('://', 1)[0]!r} is not a listener name"
    return _port_problem(_as_url(text))


def _as_url(text: str) -> ParseResult:
    """The listener as a URL whose scheme urllib accepts (Kafka's names may hold `_`)."""
    return urlparse("kafka://" + text.split("://", 1)[1])


def _port_problem(url: ParseResult) -> str | None:
    try:
        port = url.port
    except ValueError:
        return "invalid port"
    return "no port" if port is None else None


def http_listener_problem(text: str) -> str | None:
    """What is wrong with a `metrics.listener` value, or None."""
    if "://" not in text:
        return f"no scheme: write http://{text}"
    url = urlparse(text)
    if url.scheme.lower() != "http":
        return f"{url.scheme}: only http is served"
    if problem := _port_problem(url):
        return problem
    if url.path not in ("", "/", "/metrics"):
        return f"the path is always /metrics, not {url.path}"
    return None


def parse_http_listener(text: str) -> Listener | None:
    """`metrics.listener` as host and port; None when empty (no endpoint)."""
    if not text:
        return None
    url = urlparse(text)
    assert url.port is not None
    return Listener(url.hostname or "0.0.0.0", url.port)


def parse_listeners(key: str, text: str) -> dict[str, Listener]:
    found: dict[str, Listener] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        problem = listener_problem(item)
        if problem:
            raise ConfigError(f"{key}: {item!r}: {problem}")
        url = _as_url(item)
        assert url.port is not None
        found[listener_name(item)] = Listener(url.hostname or "0.0.0.0", url.port)
    return found


LISTENER_PREFIX = "listener.name."
PER_LISTENER = ("ssl.", "sasl.enabled.mechanisms", "sasl.server.max.receive.size",
                "connections.max.reauth.ms")
PER_LISTENER_KEYS = frozenset({"max.connections", "max.connection.creation.rate"})  # exactly these
_MECHANISM_JAAS = re.compile(r"[a-z0-9-]+\.sasl\.jaas\.config")


def listener_key(key: str) -> tuple[str, str] | None:
    """`listener.name.<listener>.<key>`: (LISTENER, key) for a key a listener may override."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    name, _, rest = key[len(LISTENER_PREFIX):].partition(".")
    per_listener = rest in PER_LISTENER_KEYS or rest in KEYS and rest.startswith(PER_LISTENER)
    if name and (per_listener or _MECHANISM_JAAS.fullmatch(rest)):
        return name.upper(), rest
    return None


def _coerce(key: str, value: object) -> object:
    if (per_listener := listener_key(key)) is not None:
        inner = per_listener[1]
        return _coerce(inner, value) if inner in KEYS else Text()(value)
    spec = KEYS.get(key)
    if key in RESERVED:
        raise ConfigError(f"{key} is not supported yet ({RESERVED[key]}); remove it from the config")
    if spec is None:
        raise ConfigError(f"unknown configuration key {key!r}")
    try:
        return spec.parse(value)
    except (TypeError, ValueError) as exc:
        detail = f" ({exc.args[1]})" if len(exc.args) > 1 else ""
        raise ConfigError(f"{key} must be {exc.args[0]}, got {_shown(value)}{detail}") from None


def _shown(value: object) -> str:
    if isinstance(value, list):
        return f"a YAML list {value!r}"
    if isinstance(value, dict):
        return f"a YAML mapping {value!r}"
    return repr(value)


def _derive(values: dict[str, Any], given: set[str]) -> None:
    """Kafka's precedence: *.ms over *.minutes over *.hours (a negative one: no limit)."""
    if "log.retention.ms" not in given:
        if "log.retention.minutes" in given:
            values["log.retention.ms"] = max(values["log.retention.minutes"] * 60_000, -1)
        elif "log.retention.hours" in given:
            values["log.retention.ms"] = max(values["log.retention.hours"] * 3_600_000, -1)
    if "log.roll.ms" not in given and "log.roll.hours" in given:
        values["log.roll.ms"] = values["log.roll.hours"] * 3_600_000


def build_config(raw: Mapping[str, Any], overrides: Mapping[str, str] = {}) -> BrokerConfig:
    values = {key: spec.default for key, spec in KEYS.items()}
    merged = {**raw, **overrides}
    for key, value in merged.items():
        values[key] = _coerce(str(key), value)
    _derive(values, set(merged))
    config = BrokerConfig(values, {key: values[key] for key in merged})
    _check(config)
    return config


def _check(config: BrokerConfig) -> None:
    """Rules that involve more than one key."""
    _check_listeners(config)
    dirs = [d.resolve() for d in config.log_dirs]
    if len(set(dirs)) < len(dirs):
        raise ConfigError(f"log.dirs names the same directory twice: {', '.join(map(str, config.log_dirs))}")
    low, high = config.group_min_session_timeout_ms, config.group_max_session_timeout_ms
    if high < low:
        raise ConfigError(
            f"group.max.session.timeout.ms ({high}) must be \u2265 group.min.session.timeout.ms ({low})"
        )
    _check_consumer_groups(config)
    if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
        raise ConfigError("max.connections.per.ip can be set to zero only if "
                          "max.connections.per.ip.overrides property is set.")
    wait, lag = config.replica_fetch_wait_max_ms, config.replica_lag_time_max_ms
    if wait > lag:  # Kafka's rule: a follower parked at its leader longer than this leaves the ISR
        raise ConfigError(
            f"replica.fetch.wait.max.ms ({wait}) must be \u2264 replica.lag.time.max.ms ({lag})"
        )


def _check_consumer_groups(config: BrokerConfig) -> None:
    """Kafka's rules for the consumer-protocol group settings (GroupCoordinatorConfig)."""
    values = config.values
    for name in ("heartbeat.interval.ms", "session.timeout.ms", "assignment.interval.ms"):
        value = values[f"group.consumer.{name}"]
        low, high = values[f"group.consumer.min.{name}"], values[f"group.consumer.max.{name}"]
        if not low <= value <= high:
            raise ConfigError(
                f"group.consumer.{name} ({value}) must be between group.consumer.min.{name} ({low}) "
                f"and group.consumer.max.{name} ({high})"
            )
    interval = config.group_consumer_heartbeat_interval_ms
    session = config.group_consumer_session_timeout_ms
    if interval >= session:
        raise ConfigError(
            f"group.consumer.heartbeat.interval.ms ({interval}) must be < group.consumer.session.timeout.ms "
            f"({session})"
        )


def _check_listeners(config: BrokerConfig) -> None:
    """Every listener's name has a protocol, every advertised one exists, the inter-broker
    one is advertised, and nothing advertises an address no client can reach."""
    names = list(config.listeners)
    mapped = {item.split(":")[0].upper() for item in config.listener_security_protocol_map.split(",")}
    for name in names:
        if name not in SECURITY_PROTOCOLS and name not in mapped:
            raise ConfigError(f"listeners: {name} has no protocol in listener.security.protocol.map "
                              f"(add {name}:PLAINTEXT)")
    advertised = config.advertised_listeners
    for name, at in advertised.items():
        if name not in names:
            raise ConfigError(f"advertised.listeners: {name} is not one of listeners ({', '.join(names)})")
        if at.host in ("0.0.0.0", "::"):
            raise ConfigError(
                f"advertised.listeners: clients cannot connect to {at.host}; "
                "set advertised.listeners to an address they can reach"
            )
    inter = config.inter_broker_listener
    if inter not in names or inter not in advertised:
        raise ConfigError(f"inter.broker.listener.name: {inter} is not an advertised listener "
                          f"({', '.join(advertised)})")
    _check_security(config, names)


def _check_security(config: BrokerConfig, names: list[str]) -> None:
    """A TLS listener has a keystore; a SASL listener serves only mechanisms Gregor has;
    the brokers' own connections are PLAINTEXT so far."""
    for name in names:
        protocol = config.security_protocol(name)
        if protocol in ("SSL", "SASL_SSL") and not config.for_listener(name, "ssl.keystore.location"):
            raise ConfigError(f"listeners: {name} is {protocol}: set ssl.keystore.location "
                              f"(or listener.name.{name.lower()}.ssl.keystore.location)")
        if protocol.startswith("SASL_"):
            mechanisms = _items(config.for_listener(name, "sasl.enabled.mechanisms")) or []
            unknown = [m for m in mechanisms if m.upper() not in SASL_MECHANISMS]
            if unknown or not mechanisms:
                raise ConfigError(f"sasl.enabled.mechanisms: {', '.join(unknown) or 'none'} on {name}: "
                                  f"Gregor serves {', '.join(SASL_MECHANISMS)}")
    inter = config.inter_broker_listener
    if config.security_protocol(inter).startswith("SASL_"):
        mechanism = config.sasl_mechanism_inter_broker_protocol.upper()
        enabled = (_items(config.for_listener(inter, "sasl.enabled.mechanisms")) or [])
        if mechanism not in [m.upper() for m in enabled]:
            raise ConfigError(f"sasl.mechanism.inter.broker.protocol: {mechanism} is not enabled on the "
                              f"inter-broker listener {inter} (sasl.enabled.mechanisms)")


def parse_overrides(items: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form key=value")
        result[key.strip()] = value
    return result


def load_config(path: Path, overrides: list[str]) -> BrokerConfig:
    if path.suffix == ".properties":
        raise ConfigError(_properties_hint(path))
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not text (expected YAML)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {_one_line(exc)}") from None
    if isinstance(raw, str) and "=" in raw:
        raise ConfigError(_properties_hint(path))
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must be a YAML mapping of key: value")
    return build_config(raw, parse_overrides(overrides))


def _properties_hint(path: Path) -> str:
    return (
        f"config file {path} looks like a Java .properties file; Gregor reads YAML with the "
        "same key names: write `key: value` lines (e.g. `node.id: 1`), as in config/broker.yaml"
    )


def _one_line(exc: yaml.YAMLError) -> str:
    return " ".join(str(exc).split())


# -- documentation: docs/configuration.md's key table is generated from KEYS -------

DOCS_BEGIN = (
    "<!-- config-keys: generated by `gregor config-docs --doc docs/configuration.md`; do not edit -->"
)
DOCS_END = "<!-- end of config-keys -->"


def _expected(parse: Callable[[Any], Any]) -> str:
    return str(getattr(parse, "expected", ""))


def _default_text(spec: Key) -> str:
    if spec.default in ("", None):
        return "(none)"
    if spec.default is True or spec.default is False:
        return str(spec.default).lower()
    return f"`{spec.default}`"


def config_docs() -> str:
    """A Markdown table of every key: name, default, accepted values, meaning."""
    lines = ["| key | default | accepted values | meaning |", "| --- | --- | --- | --- |"]
    for key, spec in KEYS.items():
        accepted = _expected(spec.parse).replace("|", "\\|")
        lines.append(f"| `{key}` | {_default_text(spec)} | {accepted} | {spec.doc} |")
    if RESERVED:
        reserved = ", ".join(f"`{key}` ({reason})" for key, reason in RESERVED.items())
        lines += ["", f"Refused as not supported yet: {reserved}."]
    return "\n".join(lines) + "\n"


def with_config_docs(page: str) -> str:
    """`page` with the text between the config-keys markers replaced by config_docs()."""
    head, sep, rest = page.partition(DOCS_BEGIN)
    _old, sep2, tail = rest.partition(DOCS_END)
    if not sep or not sep2:
        raise ValueError("the page has no config-keys markers")
    return f"{head}{DOCS_BEGIN}\n{config_docs()}{DOCS_END}{tail}"
