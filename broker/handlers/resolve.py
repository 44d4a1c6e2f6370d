"""Finding the partition a request names, by topic name or (newer versions) topic id."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from broker.replication.replica_manager import Partition
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

ZERO_UUID = uuid.UUID(int=0)
# The versions whose entries name a topic by its id only (Produce v13+, Fetch v13+)
BY_ID_ONLY = {int(ApiKey.PRODUCE): 13, int(ApiKey.FETCH): 13}


def topic_name(ctx: RequestContext, named: object) -> tuple[str | None, ErrorCode]:
    """The topic's name from a request entry (any API's) carrying `name`/`topic` or `topic_id`."""
    name = getattr(named, "name", None) or getattr(named, "topic", None)
    if name:
        return name, ErrorCode.NONE
    topic_id = getattr(named, "topic_id", None)
    if topic_id is not None and topic_id != ZERO_UUID:
        found = ctx.services.topics.by_id(topic_id)
        if found is not None:
            return found.name, ErrorCode.NONE
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    if ctx.version >= BY_ID_ONLY.get(int(ctx.header.api_key), 1 << 15):  # no id at all: Kafka knows none
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def resolve_partition(
    ctx: RequestContext, named: object, index: int
) -> tuple[Partition | None, ErrorCode]:
    name, error = topic_name(ctx, named)
    if name is None:
        return None, error
    part = ctx.services.partitions.partition(name, index)
    if part is None:
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not part.is_leader:
        return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
    return part, ErrorCode.NONE


def check_leader_epoch(part: Partition, requested: int) -> ErrorCode:
    """Kafka's current-leader-epoch check (-1 means the client did not say)."""
    if requested == -1 or requested == part.leader_epoch:
        return ErrorCode.NONE
    if requested > part.leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.FENCED_LEADER_EPOCH
