"""Metadata (all versions, v0/v1 kept for aiokafka) and DescribeCluster; both answer the
authorized operations (KIP-430) when asked, through the Authorizer port."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from broker.api.answers import Kept
from broker.api.authorize import authorize, authorize_cluster, authorized_operations, cluster_operations
from broker.api.registry import Handlers
from broker.security.acl import NOT_PROVIDED, AclOperation, ResourceType
from broker.store.local_store import TopicMetadata, topic_name_error
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.spliced import encode_item, encode_spliced

if TYPE_CHECKING:
    from broker.api.context import RequestContext
    from broker.api.services import Services

METADATA, DESCRIBE_CLUSTER = ApiKey.METADATA, ApiKey.DESCRIBE_CLUSTER
M = MetadataResponse
D = DescribeClusterResponse
ZERO_UUID = uuid.UUID(int=0)
Topic = M.MetadataResponseTopic


def _brokers(ctx: RequestContext) -> list[M.MetadataResponseBroker]:
    return [
        M.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in ctx.services.cluster.brokers_on(ctx.caller.listener)
    ]


def _partitions(services: Services, topic: TopicMetadata) -> list[Topic.MetadataResponsePartition]:
    result = []
    for index in range(topic.partitions):
        info = services.cluster.partition(topic.name, index)
        if info is None:
            continue
        error = ErrorCode.LEADER_NOT_AVAILABLE if info.leader < 0 else ErrorCode.NONE
        result.append(
            M.MetadataResponseTopic.MetadataResponsePartition(
                error_code=error, partition_index=index, leader_id=info.leader,
                leader_epoch=info.leader_epoch, replica_nodes=list(info.replicas),
                isr_nodes=list(info.isr), offline_replicas=list(info.offline),
            )
        )
    return result


def _topic(services: Services, topic: TopicMetadata) -> Topic:
    """A topic's answer is built once per change of the topic (`topic_token`), not per
    request, and encoded once per version (`encode_metadata`): a full Metadata costs what
    changed since the last, not what the cluster holds. The answer is shared: not to be changed."""
    key = services.cluster.topic_token(topic.name)
    kept = services.metadata_topics.get(
        topic.name, None if key is None else (key, topic.topic_id, topic.partitions),
        lambda: Kept(_built_topic(services, topic), _encode_topic),
    )
    return kept.part


def _built_topic(services: Services, topic: TopicMetadata) -> Topic:
    return M.MetadataResponseTopic(
        error_code=ErrorCode.NONE, name=topic.name, topic_id=topic.topic_id,
        is_internal=topic.internal, partitions=_partitions(services, topic),
    )


def _encode_topic(topic: Topic, version: int) -> bytes:
    return encode_item(M, "topics", topic, version)


def encode_metadata(ctx: RequestContext, response: M, version: int) -> bytes:
    """The answer with each kept topic's bytes written in as they are (a topic built for this
    request alone, an error or one with its authorized operations, is encoded here)."""
    kept = ctx.services.metadata_topics
    items = []
    for topic in response.topics:
        found = kept.peek(topic.name) if topic.name is not None else None
        items.append(found.encoded(version) if found is not None and found.part is topic
                     else _encode_topic(topic, version))
    return encode_spliced(response, "topics", items, version)


def _error_topic(error: ErrorCode, name: str | None, topic_id: uuid.UUID = ZERO_UUID) -> Topic:
    return M.MetadataResponseTopic(
        error_code=error, name=name, topic_id=topic_id, is_internal=False, partitions=[]
    )


def _may_describe(ctx: RequestContext, name: str) -> bool:
    return authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Kafka: Create on the cluster, else on the topic."""
    return authorize_cluster(ctx, AclOperation.CREATE) or authorize(
        ctx, AclOperation.CREATE, ResourceType.TOPIC, name
    )


def _lookup(ctx: RequestContext, wanted: MetadataRequest.MetadataRequestTopic, auto_create: bool) -> Topic:
    """A named topic: TOPIC_AUTHORIZATION_FAILED without Describe on it (or, to create it
    automatically, without Create)."""
    services = ctx.services
    denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if wanted.name is None:
        found = services.topics.by_id(wanted.topic_id)
        if found is None:
            return _error_topic(ErrorCode.UNKNOWN_TOPIC_ID, None, wanted.topic_id)
        if not _may_describe(ctx, found.name):
            return _error_topic(denied, None, wanted.topic_id)
        return _topic(services, found)
    if not _may_describe(ctx, wanted.name):
        return _error_topic(denied, wanted.name)
    if topic_name_error(wanted.name):
        return _error_topic(ErrorCode.INVALID_TOPIC_EXCEPTION, wanted.name)
    topic = services.topics.get(wanted.name)
    if topic is None and auto_create and not _may_create(ctx, wanted.name):
        return _error_topic(denied, wanted.name)
    if topic is None and auto_create:
        result = services.topics.auto_create(wanted.name)
        if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            return _error_topic(result.error, wanted.name)
        topic = services.topics.get(wanted.name)
    if topic is None:
        return _error_topic(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, wanted.name)
    return _topic(services, topic)


async def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> M:
    services = ctx.services
    named = request.topics
    if named is None or (ctx.version == 0 and not named):  # every topic
        every = services.topics.all()
        services.metadata_topics.retain(every)
        topics = [_topic(services, t) for t in every.values() if _may_describe(ctx, t.name)]
    else:
        auto = bool(request.allow_auto_topic_creation)  # true below v4, the schema's default
        topics = [_lookup(ctx, wanted, auto) for wanted in named]
    if request.include_topic_authorized_operations:
        topics = [_with_operations(ctx, t) for t in topics]
    asks_cluster = request.include_cluster_authorized_operations  # the field of v8-10 only
    return M(
        throttle_time_ms=0, brokers=_brokers(ctx), cluster_id=services.cluster.cluster_id,
        controller_id=services.cluster.controller_id(), topics=topics, error_code=ErrorCode.NONE,
        authorized_operations=cluster_operations(ctx) if asks_cluster else NOT_PROVIDED,
    )


def _with_operations(ctx: RequestContext, topic: Topic) -> Topic:
    """As Kafka: every topic looked up by name gets them, found or not (an unknown topic id
    does not, nor a topic the caller may not describe); on a copy, the kept answer is shared."""
    if topic.name is None or topic.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        return topic
    return M.MetadataResponseTopic(
        error_code=topic.error_code, name=topic.name, topic_id=topic.topic_id, is_internal=topic.is_internal,
        partitions=topic.partitions,
        authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, topic.name),
    )


async def handle_describe_cluster(ctx: RequestContext, request: DescribeClusterRequest) -> D:
    services = ctx.services
    asks = request.include_cluster_authorized_operations
    # Every broker here holds a live registration: one whose session ended is gone from etcd,
    # not kept fenced as KRaft keeps it, so none is fenced and `include_fenced_brokers` (v2,
    # KIP-1073) adds none.
    brokers = services.cluster.brokers_on(ctx.caller.listener)
    return D(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, endpoint_type=1,
        authorized_operations=cluster_operations(ctx) if asks else NOT_PROVIDED,
        cluster_id=services.cluster.cluster_id, controller_id=services.cluster.controller_id(),
        brokers=[D.DescribeClusterBroker(broker_id=b.node_id, host=b.host, port=b.port,
                                         rack=b.rack, is_fenced=False) for b in brokers],
    )


VERSIONS = {METADATA: (0, 13), DESCRIBE_CLUSTER: (0, 2)}
HANDLERS: Handlers = {METADATA: handle_metadata, DESCRIBE_CLUSTER: handle_describe_cluster}
ENCODERS = {METADATA: encode_metadata}
