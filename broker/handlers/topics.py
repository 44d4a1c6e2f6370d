"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import TYPE_CHECKING

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from broker.api.authorize import authorize, authorize_cluster
from broker.api.registry import Handlers
from broker.cluster.topic_manager import NewTopic, TopicResult
from broker.handlers.configs import resolved_topic_configs
from broker.handlers.forwarding import on_controller
from broker.handlers.resolve import ZERO_UUID
from broker.security.acl import AclOperation, ResourceType
from protocol.errors import ErrorCode
from storage.log_config import format_config_value

if TYPE_CHECKING:
    from broker.api.context import RequestContext

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
C = CreateTopicsResponse
D = DeleteTopicsResponse
P = CreatePartitionsResponse


def _creatable(topic: CreateTopicsRequest.CreatableTopic) -> NewTopic:
    """The request entry as a NewTopic (its manual assignment, if any, is checked with it)."""
    configs = {c.name: c.value for c in topic.configs}
    manual = tuple((a.partition_index, tuple(a.broker_ids)) for a in topic.assignments or ())
    return NewTopic(topic.name, topic.num_partitions, topic.replication_factor, configs, manual)


def _may(ctx: RequestContext, operation: AclOperation, name: str) -> bool:
    return authorize(ctx, operation, ResourceType.TOPIC, name)


DENIED = "Authorization failed."


def _created(ctx: RequestContext, name: str, result: TopicResult) -> C.CreatableTopicResult:
    if result.error != ErrorCode.NONE or result.topic is None:
        return C.CreatableTopicResult(name=name, error_code=result.error, error_message=result.message)
    created = result.topic
    if not _may(ctx, AclOperation.DESCRIBE_CONFIGS, name):  # Kafka: created, its configs not shown
        return C.CreatableTopicResult(
            name=name, topic_id=created.topic_id, error_code=ErrorCode.NONE, error_message=None,
            topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            num_partitions=created.partitions, replication_factor=created.replication_factor, configs=[],
        )
    entries = [
        C.CreatableTopicResult.CreatableTopicConfigs(
            name=r.name, value=format_config_value(r.value), read_only=False,
            config_source=int(r.source), is_sensitive=False,
        )
        for r in resolved_topic_configs(ctx, created)
    ]
    return C.CreatableTopicResult(
        name=name, topic_id=created.topic_id, error_code=ErrorCode.NONE, error_message=None,
        num_partitions=created.partitions, replication_factor=created.replication_factor,
        configs=entries,
    )


def _duplicates(names: list[str]) -> set[str]:
    return {name for name, times in Counter(names).items() if times > 1}


async def handle_create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> C:
    """Kafka's answer: one result per distinct name; a name given twice is not
    created (INVALID_REQUEST), every other topic succeeds or fails on its own."""
    validate_only = bool(getattr(request, "validate_only", False))
    duplicates = _duplicates([t.name for t in request.topics])
    everywhere = authorize_cluster(ctx, AclOperation.CREATE)  # else Create per topic
    denied = [
        t.name for t in request.topics
        if t.name not in duplicates and not everywhere and not _may(ctx, AclOperation.CREATE, t.name)
    ]
    specs = [_creatable(t) for t in request.topics if t.name not in duplicates and t.name not in denied]
    outcomes = await ctx.services.topics.create_topics(specs, validate_only)
    results = [_created(ctx, spec.name, r) for spec, r in zip(specs, outcomes, strict=True)]
    results += [
        C.CreatableTopicResult(
            name=name, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name."
        )
        for name in sorted(duplicates, key=str)
    ]
    results += [
        C.CreatableTopicResult(name=n, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=DENIED)
        for n in denied
    ]
    return C(throttle_time_ms=0, topics=results)


def _delete_denied(
    ctx: RequestContext, name: str, by_id: bool, everywhere: bool
) -> D.DeletableTopicResult | None:
    """Kafka's controller: Delete on the cluster, else Describe and Delete on the topic; a topic
    named by id the caller may not Describe is answered without its name."""
    if everywhere or _may(ctx, AclOperation.DELETE, name):
        return None
    denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    describable = _may(ctx, AclOperation.DESCRIBE, name)
    if by_id:
        return D.DeletableTopicResult(name=name if describable else None, error_code=denied)
    if describable and ctx.services.topics.get(name) is None:
        return None  # UNKNOWN_TOPIC_OR_PARTITION comes first
    return D.DeletableTopicResult(name=name, error_code=denied)


async def _delete_one(
    ctx: RequestContext, name: str | None, topic_id: uuid.UUID, everywhere: bool
) -> D.DeletableTopicResult:
    by_id = name is None
    if name is None:
        found = ctx.services.topics.by_id(topic_id)
        if found is None:
            return D.DeletableTopicResult(
                name=None, topic_id=topic_id, error_code=ErrorCode.UNKNOWN_TOPIC_ID
            )
        name = found.name
    if (denied := _delete_denied(ctx, name, by_id, everywhere)) is not None:
        denied.topic_id = topic_id if by_id else ZERO_UUID
        return denied
    result = await ctx.services.topics.delete(name)
    topic_id = result.topic.topic_id if result.topic else ZERO_UUID
    return D.DeletableTopicResult(
        name=name, topic_id=topic_id, error_code=result.error, error_message=result.message
    )


async def handle_delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> D:
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    everywhere = authorize_cluster(ctx, AclOperation.DELETE)
    responses = [await _delete_one(ctx, n, i, everywhere) for n, i in wanted]
    return D(throttle_time_ms=0, responses=responses)


def _partitions_result(name: str, error: ErrorCode, message: str | None) -> P.CreatePartitionsTopicResult:
    return P.CreatePartitionsTopicResult(name=name, error_code=error, error_message=message)


async def handle_create_partitions(ctx: RequestContext, request: CreatePartitionsRequest) -> P:
    duplicates = _duplicates([t.name for t in request.topics])
    denied = [
        t.name for t in request.topics
        if t.name not in duplicates and not _may(ctx, AclOperation.ALTER, t.name)
    ]
    unique = [t for t in request.topics if t.name not in duplicates and t.name not in denied]
    wanted = [(t.name, t.count) for t in unique]
    manual = [
        [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None for t in unique
    ]
    outcomes = await ctx.services.topics.add_partitions_many(wanted, request.validate_only, manual)
    results = [
        _partitions_result(name, r.error, r.message) for (name, _), r in zip(wanted, outcomes, strict=True)
    ]
    results += [
        _partitions_result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
        for name in sorted(duplicates, key=str)
    ]
    results += [_partitions_result(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, DENIED) for name in denied]
    return P(throttle_time_ms=0, results=results)


# Not the controller: every topic answered NOT_CONTROLLER (clients refresh metadata and retry).
NOT_CONTROLLER = ErrorCode.NOT_CONTROLLER


def _create_not_controller(request: CreateTopicsRequest) -> C:
    return C(throttle_time_ms=0, topics=[
        C.CreatableTopicResult(name=t.name, error_code=NOT_CONTROLLER) for t in request.topics])


def _delete_not_controller(request: DeleteTopicsRequest) -> D:
    names = [t.name for t in request.topics] if request.topics else request.topic_names
    results = [D.DeletableTopicResult(name=n, error_code=NOT_CONTROLLER) for n in names]
    return D(throttle_time_ms=0, responses=results)


def _partitions_not_controller(request: CreatePartitionsRequest) -> P:
    results = [_partitions_result(t.name, NOT_CONTROLLER, None) for t in request.topics]
    return P(throttle_time_ms=0, results=results)


VERSIONS = {CREATE_TOPICS: (0, 7), DELETE_TOPICS: (0, 6), CREATE_PARTITIONS: (0, 3)}
HANDLERS: Handlers = {
    CREATE_TOPICS: on_controller(handle_create_topics, _create_not_controller),
    DELETE_TOPICS: on_controller(handle_delete_topics, _delete_not_controller),
    CREATE_PARTITIONS: on_controller(handle_create_partitions, _partitions_not_controller),
}
