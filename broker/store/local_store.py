"""Topic metadata and the local metadata store (single-node mode).

The store is one JSON file in the first log dir, written atomically. It holds
the topics (id, partition count, config overrides) and, in later issues, the
producer-id blocks. The cluster mode will put the same records in etcd.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from coordinator.producer_ids import ProducerIdBlock
from protocol.internal_topics import INTERNAL_TOPICS
from storage.checkpoints import fsync_dir

STORE_FILE = "gregor-metadata.json"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def to_json(self) -> dict[str, Any]:
        return {
            "topic_id": str(self.topic_id),
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "configs": self.configs,
        }

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> TopicMetadata:
        return cls(
            name=name,
            topic_id=uuid.UUID(data["topic_id"]),
            partitions=int(data["partitions"]),
            replication_factor=int(data.get("replication_factor", 1)),
            configs=dict(data.get("configs", {})),
        )


def topic_name_error(name: str | None) -> str | None:
    """Kafka's topic name rules; None when the name is legal."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_LENGTH:
        return f"topic name is longer than {MAX_TOPIC_LENGTH} characters"
    if not _LEGAL_TOPIC.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_', '-'"
    return None


class LocalMetadataStore:
    """Topics and cluster facts in one atomically replaced JSON file."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / STORE_FILE
        self._topics: dict[str, TopicMetadata] = {}
        self._next_producer_id = 0
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._acls: list[list[Any]] = []  # AclBinding.to_json() of each ACL
        self._scram: dict[str, list[Any]] = {}  # "<mechanism>/<user>" -> ScramCredential.to_json()
        self._load()

    def _load(self) -> None:
        if not self._path.exists():
            return
        data = json.loads(self._path.read_text())
        for name, topic in data.get("topics", {}).items():
            self._topics[name] = TopicMetadata.from_json(name, topic)
        self._next_producer_id = int(data.get("next_producer_id_block", 0))
        self._broker_configs = {k: dict(v) for k, v in data.get("broker_configs", {}).items()}
        self._acls = [list(a) for a in data.get("acls", [])]
        self._scram = {k: list(v) for k, v in data.get("scram", {}).items()}

    def _commit(
        self, topics: dict[str, TopicMetadata], next_producer_id: int,
        broker_configs: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """Write the new state durably, then adopt it: a failed write changes nothing."""
        configs = self._broker_configs if broker_configs is None else broker_configs
        self._save(topics, next_producer_id, configs)
        self._topics, self._next_producer_id, self._broker_configs = topics, next_producer_id, configs

    def _save(
        self, topics: dict[str, TopicMetadata], next_producer_id: int,
        broker_configs: dict[str, dict[str, str]],
    ) -> None:
        data = {
            "topics": {name: t.to_json() for name, t in sorted(topics.items())},
            "next_producer_id_block": next_producer_id,
            "broker_configs": broker_configs,
        }
        if self._acls:
            data["acls"] = self._acls
        if self._scram:
            data["scram"] = self._scram
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            json.dump(data, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self._path)
        fsync_dir(self._path.parent)  # the rename itself survives a power loss

    def topics(self) -> dict[str, TopicMetadata]:
        return dict(self._topics)

    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return next((t for t in self._topics.values() if t.topic_id == topic_id), None)

    def put_topic(self, topic: TopicMetadata) -> None:
        self._commit({**self._topics, topic.name: topic}, self._next_producer_id)

    def delete_topic(self, name: str) -> None:
        topics = dict(self._topics)
        topics.pop(name, None)
        self._commit(topics, self._next_producer_id)

    def set_partitions(self, name: str, count: int) -> TopicMetadata:
        topic = replace(self._topics[name], partitions=count)
        self.put_topic(topic)
        return topic

    def reserve_producer_ids(self, size: int) -> ProducerIdBlock:
        """Durably move the next-block pointer past a new block, then hand it out."""
        block = ProducerIdBlock(self._next_producer_id, size)
        self._commit(self._topics, block.last + 1)
        return block

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.put_topic(replace(self._topics[name], configs=dict(configs)))

    # -- dynamic broker configs: scope "" is the cluster-wide default, else a node id ----------

    def broker_configs(self, scope: str) -> dict[str, str]:
        return dict(self._broker_configs.get(scope, {}))

    def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        updated = {k: v for k, v in self._broker_configs.items() if k != scope}
        if configs:
            updated[scope] = dict(configs)
        self._commit(self._topics, self._next_producer_id, updated)

    # -- ACLs, each as AclBinding.to_json() -----------------------------------------------------

    def acls(self) -> list[list[Any]]:
        return [list(a) for a in self._acls]

    # -- SCRAM credentials: "<mechanism>/<user>" -> ScramCredential.to_json() -------------------

    def scram_credentials(self) -> dict[str, list[Any]]:
        return dict(self._scram)

    def set_scram_credentials(self, credentials: dict[str, list[Any]]) -> None:
        """Replace every SCRAM credential durably; on a failed write the old ones stay."""
        old, self._scram = self._scram, dict(credentials)
        try:
            self._save(self._topics, self._next_producer_id, self._broker_configs)
        except BaseException:
            self._scram = old
            raise

    def set_acls(self, acls: list[list[Any]]) -> None:
        """Replace every ACL durably; on a failed write the old ones stay."""
        old, self._acls = self._acls, [list(a) for a in acls]
        try:
            self._save(self._topics, self._next_producer_id, self._broker_configs)
        except BaseException:
            self._acls = old
            raise
