"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from broker.handlers.configs import resolved_topic_configs
from broker.handlers.resolve import ZERO_UUID
from protocol.errors import ErrorCode
from storage.log_config import format_config_value

if TYPE_CHECKING:
    from broker.context import RequestContext

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
C = CreateTopicsResponse
D = DeleteTopicsResponse
P = CreatePartitionsResponse


def _create_one(ctx: RequestContext, topic: Any, validate_only: bool, seen: set[str]) -> Any:
    if topic.name in seen:
        return C.CreatableTopicResult(
            name=topic.name, error_code=ErrorCode.INVALID_REQUEST,
            error_message=f"Duplicate topic name {topic.name} in the request",
        )
    seen.add(topic.name)
    if topic.assignments:
        return C.CreatableTopicResult(
            name=topic.name, error_code=ErrorCode.INVALID_REQUEST,
            error_message="manual replica assignment is not supported",
        )
    configs = {c.name: c.value for c in topic.configs}
    result = ctx.broker.topics.create(
        topic.name, topic.num_partitions, topic.replication_factor, configs, validate_only
    )
    if result.error != ErrorCode.NONE or result.topic is None:
        return C.CreatableTopicResult(
            name=topic.name, error_code=result.error, error_message=result.message
        )
    created = result.topic
    entries = [
        C.CreatableTopicResult.CreatableTopicConfigs(
            name=r.name, value=format_config_value(r.value), read_only=False,
            config_source=int(r.source), is_sensitive=False,
        )
        for r in resolved_topic_configs(ctx, created)
    ]
    return C.CreatableTopicResult(
        name=topic.name, topic_id=created.topic_id, error_code=ErrorCode.NONE,
        num_partitions=created.partitions, replication_factor=created.replication_factor,
        configs=entries,
    )


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    seen: set[str] = set()
    validate_only = bool(getattr(request, "validate_only", False))
    results = [_create_one(ctx, t, validate_only, seen) for t in request.topics]
    return C(throttle_time_ms=0, topics=results)


def _delete_one(ctx: RequestContext, name: str | None, topic_id: Any) -> Any:
    if name is None:
        found = ctx.broker.topics.by_id(topic_id)
        if found is None:
            return D.DeletableTopicResult(
                name=None, topic_id=topic_id, error_code=ErrorCode.UNKNOWN_TOPIC_ID
            )
        name = found.name
    result = ctx.broker.topics.delete(name)
    topic_id = result.topic.topic_id if result.topic else ZERO_UUID
    return D.DeletableTopicResult(
        name=name, topic_id=topic_id, error_code=result.error, error_message=result.message
    )


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    return D(throttle_time_ms=0, responses=[_delete_one(ctx, n, i) for n, i in wanted])


def _partitions_one(ctx: RequestContext, topic: Any, validate_only: bool) -> Any:
    if topic.assignments:
        return P.CreatePartitionsTopicResult(
            name=topic.name, error_code=ErrorCode.INVALID_REQUEST,
            error_message="manual replica assignment is not supported",
        )
    result = ctx.broker.topics.add_partitions(topic.name, topic.count, validate_only)
    return P.CreatePartitionsTopicResult(
        name=topic.name, error_code=result.error, error_message=result.message
    )


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    results = [_partitions_one(ctx, t, request.validate_only) for t in request.topics]
    return P(throttle_time_ms=0, results=results)


VERSIONS = {CREATE_TOPICS: (0, 7), DELETE_TOPICS: (0, 6), CREATE_PARTITIONS: (0, 3)}
HANDLERS = {
    CREATE_TOPICS: handle_create_topics,
    DELETE_TOPICS: handle_delete_topics,
    CREATE_PARTITIONS: handle_create_partitions,
}
