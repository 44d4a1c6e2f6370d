"""The local metadata store: a change is adopted only once it is on disk."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker.store.local_store import STORE_FILE, LocalMetadataStore, TopicMetadata


def test_changes_survive_reopen(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    topic = TopicMetadata("orders", uuid.uuid4(), 3, 1, {"cleanup.policy": "compact"})
    store.put_topic(topic)
    store.set_partitions("orders", 5)
    block = store.reserve_producer_ids(1000)
    again = LocalMetadataStore(tmp_path)
    expected = TopicMetadata("orders", topic.topic_id, 5, 1, {"cleanup.policy": "compact"})
    assert again.topic("orders") == expected
    assert again.reserve_producer_ids(1000).first == block.last + 1


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    store.put_topic(TopicMetadata("kept", uuid.uuid4(), 1))
    (tmp_path / STORE_FILE).with_suffix(".tmp").mkdir()  # the next write cannot create its temp file
    with pytest.raises(OSError):
        store.put_topic(TopicMetadata("lost", uuid.uuid4(), 8))
    with pytest.raises(OSError):
        store.set_partitions("kept", 9)
    with pytest.raises(OSError):
        store.delete_topic("kept")
    assert sorted(store.topics()) == ["kept"] and store.topic("kept").partitions == 1  # type: ignore[union-attr]
    assert sorted(LocalMetadataStore(tmp_path).topics()) == ["kept"]
