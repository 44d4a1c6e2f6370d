"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics and brokers (dynamic broker
configs, KIP-226: see broker/dynamic_config.py), with Kafka's sources and synonyms."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from broker.api.authorize import authorize, authorize_cluster
from broker.api.registry import Handlers
from broker.config import KEYS, LONG_MAX, Boolean, Choice, ChoiceList, Dirs, Double, Integer, Listeners, Text
from broker.dynamic_config import DEFAULT_SCOPE
from broker.security.acl import AclOperation, ResourceType
from broker.store.local_store import TopicMetadata
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.log_config import (
    DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    UNDESCRIBED_UNTIL_SET,
    BrokerProperties,
    ConfigSource,
    ResolvedConfig,
    Synonym,
    TopicConfigDef,
    format_config_value,
    parse_config_value,
    resolve_topic_config,
    topic_config_synonym,
    unused_broker_defaults,
    validate_topic_config,
)

if TYPE_CHECKING:
    from broker.api.context import RequestContext

DESCRIBE, ALTER = ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS
INCREMENTAL_ALTER = ApiKey.INCREMENTAL_ALTER_CONFIGS
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
D = DescribeConfigsResponse
Entry = D.DescribeConfigsResult.DescribeConfigsResourceResult
WIRE_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}
GROUP_CONFIGS = 32


def _config_denied(ctx: RequestContext, kind: int, name: str, operation: AclOperation) -> ErrorCode | None:
    """Kafka: DescribeConfigs/AlterConfigs on the topic, the group, or (brokers) the cluster."""
    if kind == TOPIC:
        allowed = authorize(ctx, operation, ResourceType.TOPIC, name)
        return None if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if kind == GROUP_CONFIGS:
        allowed = authorize(ctx, operation, ResourceType.GROUP, name)
        return None if allowed else ErrorCode.GROUP_AUTHORIZATION_FAILED
    if kind in (BROKER, BROKER_LOGGER):
        return None if authorize_cluster(ctx, operation) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


def resolved_topic_configs(ctx: RequestContext, topic: TopicMetadata) -> list[ResolvedConfig]:
    """Every topic config's effective value and source (DescribeConfigs, CreateTopics v5+)."""
    props = ctx.services.configs.config.explicit
    return [resolve_topic_config(key, props, topic.configs) for key in sorted(TOPIC_CONFIGS)]


def _properties(ctx: RequestContext) -> BrokerProperties:
    props = ctx.services.configs.config.explicit
    assert isinstance(props, BrokerProperties)
    return props


def _static_type(key: str) -> str | None:
    """The wire type of a static broker key, from how its value is parsed (Kafka names each)."""
    parse = KEYS[key].parse if key in KEYS else None
    if isinstance(parse, Integer):
        return "long" if parse.maximum == LONG_MAX else "int"
    kinds = ((Boolean, "boolean"), (Double, "double"), (Text | Choice, "string"),
             (ChoiceList | Dirs | Listeners, "list"))
    return next((name for cls, name in kinds if isinstance(parse, cls)), None)


def _entry(
    name: str, value: str, synonyms: list[Synonym], read_only: bool, kind: str | None, with_synonyms: bool
) -> Entry:
    """One described config; its source is its most important synonym's (Kafka's ConfigHelper)."""
    source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
    S = Entry.DescribeConfigsSynonym
    listed = [S(name=s.name, value=s.value, source=int(s.source)) for s in synonyms]
    return Entry(
        name=name, value=value, read_only=read_only, config_source=int(source),
        is_default=source == ConfigSource.DEFAULT_CONFIG, is_sensitive=False,
        synonyms=listed if with_synonyms else [], config_type=WIRE_TYPES.get(kind or "", 0),
        documentation=None,  # Gregor has none to give (Kafka's is null unless asked for)
    )


def _topic_entries(ctx: RequestContext, name: str, with_synonyms: bool) -> list[Entry]:
    topic = ctx.services.topics.get(name)
    assert topic is not None
    props = _properties(ctx)
    entries = []
    for r in resolved_topic_configs(ctx, topic):
        value = format_config_value(r.value)
        synonyms = [Synonym(r.name, value, ConfigSource.TOPIC_CONFIG)] if r.name in topic.configs else []
        broker_key = topic_config_synonym(r.name)
        if broker_key is not None:
            synonyms += props.synonyms(broker_key)
        entries.append(_entry(r.name, value, synonyms, False, TOPIC_CONFIGS[r.name].type, with_synonyms))
    return entries


def _broker_entries(ctx: RequestContext, scope: str, with_synonyms: bool) -> list[Entry]:
    """A node's every key; the cluster-wide default ("") lists only its dynamic keys (as Kafka)."""
    props = _properties(ctx)
    if scope == DEFAULT_SCOPE:
        only = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        return [
            _entry(key, value, [s for s in props.synonyms(key) if s.source == only], False,
                   DYNAMIC_BROKER_CONFIGS[key].type, with_synonyms)
            for key, value in sorted(props.dynamic_default.items())
        ]
    static = ctx.services.configs.config.values
    shown = {**unused_broker_defaults(), **static}
    shown |= {k: props[k] for k in UNDESCRIBED_UNTIL_SET if k in props}
    entries = []
    for key in sorted(shown):
        value = props.get(key, shown[key])
        dynamic = DYNAMIC_BROKER_CONFIGS.get(key)
        kind = dynamic.type if dynamic is not None else _static_type(key)
        text = format_config_value(value) if isinstance(value, bool | int | float | str) else str(value)
        entries.append(_entry(key, text, props.synonyms(key), dynamic is None, kind, with_synonyms))
    return entries


def _broker_scope(ctx: RequestContext, name: str, describing: bool) -> tuple[str | None, str | None]:
    """The scope a BROKER resource names, or Kafka's INVALID_REQUEST message."""
    if not name:
        return DEFAULT_SCOPE, None
    node_id = ctx.services.cluster.node_id
    try:
        requested = int(name)
    except ValueError:
        word = "Broker" if describing else "Node"
        return None, f"{word} id must be an integer, but it is: {name}"
    if requested != node_id:
        either = " or empty string" if describing else ""
        return None, f"Unexpected broker id, expected {node_id}{either}, but received {name}"
    return str(node_id), None


def _describe_one(
    ctx: RequestContext, resource: DescribeConfigsRequest.DescribeConfigsResource, with_synonyms: bool
) -> D.DescribeConfigsResult:
    kind, name = resource.resource_type, resource.resource_name
    error, message, entries = ErrorCode.NONE, None, []
    if (denied := _config_denied(ctx, kind, name, AclOperation.DESCRIBE_CONFIGS)) is not None:
        error = denied
    elif kind == TOPIC:
        if ctx.services.topics.get(name) is None:
            error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
        else:
            entries = _topic_entries(ctx, name, with_synonyms)
    elif kind == BROKER:
        scope, message = _broker_scope(ctx, name, describing=True)
        if scope is None:
            error = ErrorCode.INVALID_REQUEST
        else:
            entries = _broker_entries(ctx, scope, with_synonyms)
    elif kind != BROKER_LOGGER:
        error, message = ErrorCode.INVALID_REQUEST, f"Unsupported resource type {kind}"
    keys = resource.configuration_keys
    if keys:
        entries = [e for e in entries if e.name in keys]
    return D.DescribeConfigsResult(error_code=error, error_message=message,
                                   resource_type=kind, resource_name=name, configs=entries)


async def handle_describe(ctx: RequestContext, request: DescribeConfigsRequest) -> D:
    with_synonyms = bool(request.include_synonyms)  # false below v1, as the schema's default
    return D(throttle_time_ms=0, results=[_describe_one(ctx, r, with_synonyms) for r in request.resources])


Edit = Callable[[dict[str, str]], str | None]


Outcome = tuple[ErrorCode, str | None]


async def _alter_topic(ctx: RequestContext, name: str, edit: Edit, validate_only: bool) -> Outcome:
    topic = ctx.services.topics.get(name)
    configs = dict(topic.configs) if topic is not None else {}
    problem = edit(configs)
    if problem is None:
        problem = next(filter(None, (validate_topic_config(k, v) for k, v in configs.items())), None)
    if problem is not None:  # Kafka's controller validates the configs first, then looks for the topic
        return ErrorCode.INVALID_CONFIG, problem
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
    if not validate_only:
        return await ctx.services.topics.set_configs(name, configs)
    return ErrorCode.NONE, None


Result = TypeVar("Result")


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One config of an alter request: AlterConfigs' are all SET (of the whole new set)."""

    name: str
    op: int
    value: str | None


@dataclass(frozen=True, slots=True)
class AlterResource:
    kind: int
    name: str
    ops: tuple[ConfigOp, ...]


def _replace_all(resource: AlterResource) -> Edit:
    def edit(configs: dict[str, str]) -> str | None:
        configs.clear()
        for c in resource.ops:
            if c.value is None:
                return f"Null value not supported for config {c.name}"
            configs[c.name] = c.value
        return None

    return edit


def _incremental(resource: AlterResource) -> Edit:
    def edit(configs: dict[str, str]) -> str | None:
        for c in resource.ops:
            problem = _apply_op(configs, c.name, c.op, c.value)
            if problem:
                return problem
        return None

    return edit


def _apply_op(configs: dict[str, str], name: str, op: int, value: str | None) -> str | None:
    if op == DELETE:  # as Kafka, deleting a config that is not set (even one it does not know) is no change
        configs.pop(name, None)
        return None
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        return f"Unknown topic config name: {name}"
    if value is None:
        return f"Null value not supported for config {name}"
    if op == SET:
        configs[name] = value
        return None
    if op not in (APPEND, SUBTRACT):
        return f"Unknown config operation {op}"
    if definition.type != "list":
        return f"Config {name} is not a list; APPEND/SUBTRACT do not apply"
    _edit_list(configs, definition, op, value)
    return None


def _edit_list(configs: dict[str, str], definition: TopicConfigDef, op: int, value: str) -> None:
    """APPEND / SUBTRACT the comma-separated ``value`` to a list config (from its default)."""
    name = definition.name
    current = configs.get(name, format_config_value(parse_config_value(definition, definition.default)))
    items = [v for v in current.split(",") if v]
    for item in value.split(","):
        if op == APPEND and item not in items:
            items.append(item)
        elif op == SUBTRACT and item in items:
            items.remove(item)
    configs[name] = ",".join(items)


# -- BROKER resources: dynamic broker configs, validated as Kafka's ConfigAdminManager does ------


def _alter_broker(ctx: RequestContext, resource: AlterResource, incremental: bool,
validate_only: bool) -> Outcome:
    scope, problem = _broker_scope(ctx, resource.name, describing=False)
    if scope is None:
        return ErrorCode.INVALID_REQUEST, problem
    names = [c.name for c in resource.ops]
    if len(set(names)) != len(names):
        return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
    deleting = {c.name for c in resource.ops if c.op == DELETE}
    nulls = [c.name for c in resource.ops if c.value is None and c.name not in deleting]
    if nulls:
        return ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
    dynamic = ctx.services.configs
    configs = dynamic.current(scope) if incremental else {}
    for c in resource.ops:
        outcome = _broker_op(configs, c.name, c.op, c.value)
        if outcome is not None:
            return outcome
    problem = dynamic.check(scope, configs)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem
    if not validate_only:
        dynamic.replace(scope, configs)
    return ErrorCode.NONE, None


def _broker_op(configs: dict[str, str], name: str, op: int, value: str | None) -> Outcome | None:
    if op == DELETE:
        configs.pop(name, None)
        return None
    assert value is not None
    if op == SET:
        configs[name] = value
        return None
    if op not in (APPEND, SUBTRACT):
        return ErrorCode.INVALID_REQUEST, f"Unknown operations type {op}"
    definition = DYNAMIC_BROKER_CONFIGS.get(name)
    if definition is None or definition.type != "list":  # Kafka asks the type first: INVALID_CONFIG
        verb = "append" if op == APPEND else "subtract"
        return ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}"
    _edit_list(configs, definition, op, value)
    return None


async def _alter_one(
    ctx: RequestContext, resource: AlterResource, incremental: bool, validate_only: bool
) -> Outcome:
    kind = resource.kind
    if (denied := _config_denied(ctx, kind, resource.name, AclOperation.ALTER_CONFIGS)) is not None:
        return denied, None
    if kind == TOPIC:
        edit = _incremental(resource) if incremental else _replace_all(resource)
        return await _alter_topic(ctx, resource.name, edit, validate_only)
    if kind == BROKER:
        return _alter_broker(ctx, resource, incremental, validate_only)
    return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {kind}"


async def _alter_all(
    ctx: RequestContext, resources: Iterable[AlterResource], incremental: bool, validate_only: bool
) -> list[tuple[AlterResource, Outcome]]:
    return [(r, await _alter_one(ctx, r, incremental, validate_only)) for r in resources]


def _results(done: list[tuple[AlterResource, Outcome]], make: Callable[..., Result]) -> list[Result]:
    """Each resource's answer, as the response's own result class (`make`)."""
    return [make(error_code=e, error_message=m, resource_type=r.kind, resource_name=r.name)
            for r, (e, m) in done]


async def handle_alter(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    R = AlterConfigsResponse
    resources = [
        AlterResource(r.resource_type, r.resource_name, tuple(ConfigOp(c.name, SET,
        c.value) for c in r.configs))
        for r in request.resources
    ]
    done = await _alter_all(ctx, resources, False, request.validate_only)
    return R(throttle_time_ms=0, responses=_results(done, R.AlterConfigsResourceResponse))


async def handle_incremental_alter(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    R = IncrementalAlterConfigsResponse
    resources = [
        AlterResource(r.resource_type, r.resource_name,
                      tuple(ConfigOp(c.name, c.config_operation, c.value) for c in r.configs))
        for r in request.resources
    ]
    done = await _alter_all(ctx, resources, True, request.validate_only)
    return R(throttle_time_ms=0, responses=_results(done, R.AlterConfigsResourceResponse))


VERSIONS = {DESCRIBE: (0, 4), ALTER: (0, 2), INCREMENTAL_ALTER: (0, 1)}
HANDLERS: Handlers = {
    DESCRIBE: handle_describe,
    ALTER: handle_alter,
    INCREMENTAL_ALTER: handle_incremental_alter,
}
