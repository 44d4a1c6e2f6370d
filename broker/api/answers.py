"""Parts of answers built per topic and kept while the topic does not change (Metadata's
topics, with their encodings): a request then costs what changed since, not what the cluster
holds."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class Kept(Generic[T]):
    """A part of an answer and its encodings, one per wire version asked, each made on first
    use (`protocol.spliced` writes them into the answer)."""

    part: T
    encode: Callable[[T, int], bytes]
    _encoded: dict[int, bytes] = field(default_factory=dict)

    def encoded(self, version: int) -> bytes:
        found = self._encoded.get(version)
        if found is None:
            found = self._encoded[version] = self.encode(self.part, version)
        return found


class TopicAnswers(Generic[T]):
    """Per topic, the last part built and the key it was built at (`Cluster.topic_token` and
    whatever else it was built from). A part handed out is shared by every answer that asks
    for it until its key changes: callers must not change it."""

    def __init__(self) -> None:
        self._parts: dict[str, tuple[Hashable, T]] = {}

    def get(self, topic: str, key: Hashable | None, build: Callable[[], T]) -> T:
        """The part kept for `topic` at `key`, else a new one from `build` (kept unless `key`
        is None: nothing promises it stays true)."""
        kept = self._parts.get(topic)
        if kept is not None and key is not None and kept[0] == key:
            return kept[1]
        part = build()
        if key is None:
            self._parts.pop(topic, None)
        else:
            self._parts[topic] = (key, part)
        return part

    def peek(self, topic: str) -> T | None:
        """The part kept for `topic`, whatever its key."""
        kept = self._parts.get(topic)
        return None if kept is None else kept[1]

    def retain(self, topics: Iterable[str]) -> None:
        """Forget the parts of topics not among `topics` (the ones that exist now)."""
        live = set(topics)
        for gone in [t for t in self._parts if t not in live]:
            del self._parts[gone]

    def __len__(self) -> int:
        return len(self._parts)
