"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics (and broker reads)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

from broker.metadata import TopicMetadata
from protocol.errors import ErrorCode
from storage.log_config import (
    TOPIC_CONFIGS,
    ConfigSource,
    ResolvedConfig,
    format_config_value,
    parse_config_value,
    resolve_topic_config,
    validate_topic_config,
)

if TYPE_CHECKING:
    from broker.context import RequestContext

DESCRIBE, ALTER, INCREMENTAL_ALTER = 32, 33, 44
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
D = DescribeConfigsResponse
Entry = D.DescribeConfigsResult.DescribeConfigsResourceResult
WIRE_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}


def resolved_topic_configs(ctx: RequestContext, topic: TopicMetadata) -> list[ResolvedConfig]:
    """Every topic config's effective value and source (DescribeConfigs, CreateTopics v5+)."""
    props = ctx.broker.config.explicit
    return [resolve_topic_config(key, props, topic.configs) for key in sorted(TOPIC_CONFIGS)]


def _topic_entries(ctx: RequestContext, name: str) -> list[Any]:
    topic = ctx.broker.topics.get(name)
    assert topic is not None
    return [
        Entry(
            name=r.name, value=format_config_value(r.value), read_only=False,
            config_source=int(r.source), is_default=r.is_default, is_sensitive=False,
            synonyms=[], config_type=WIRE_TYPES.get(TOPIC_CONFIGS[r.name].type, 0),
        )
        for r in resolved_topic_configs(ctx, topic)
    ]


def _broker_entries(ctx: RequestContext) -> list[Any]:
    values = ctx.broker.config.values
    return [
        Entry(name=key, value=format_config_value(value), read_only=True,
              config_source=int(ConfigSource.STATIC_BROKER_CONFIG), is_default=False, is_sensitive=False,
              synonyms=[], config_type=0)
        for key, value in sorted(values.items())
    ]


def _describe_one(ctx: RequestContext, resource: Any) -> Any:
    kind, name = resource.resource_type, resource.resource_name
    error, message, entries = ErrorCode.NONE, None, []
    if kind == TOPIC:
        if ctx.broker.topics.get(name) is None:
            error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
        else:
            entries = _topic_entries(ctx, name)
    elif kind == BROKER:
        if name not in ("", str(ctx.broker.node_id)):
            error, message = ErrorCode.INVALID_REQUEST, f"Unexpected broker id {name}"
        else:
            entries = _broker_entries(ctx)
    elif kind != BROKER_LOGGER:
        error, message = ErrorCode.INVALID_REQUEST, f"Unsupported resource type {kind}"
    keys = resource.configuration_keys
    if keys is not None:
        entries = [e for e in entries if e.name in keys]
    return D.DescribeConfigsResult(error_code=error, error_message=message,
                                   resource_type=kind, resource_name=name, configs=entries)


async def handle_describe(ctx: RequestContext, request: Any) -> Any:
    return D(throttle_time_ms=0, results=[_describe_one(ctx, r) for r in request.resources])


Edit = Callable[[dict[str, str]], str | None]


def _alter_topic(
    ctx: RequestContext, resource: Any, edit: Edit, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    name = resource.resource_name
    if resource.resource_type != TOPIC:
        if resource.resource_type == BROKER:
            return ErrorCode.INVALID_REQUEST, "broker configs cannot be changed dynamically"
        return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}"
    topic = ctx.broker.topics.get(name)
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
    configs = dict(topic.configs)
    problem = edit(configs)
    if problem is None:
        problem = next(filter(None, (validate_topic_config(k, v) for k, v in configs.items())), None)
    if problem is not None:
        return ErrorCode.INVALID_CONFIG, problem
    if not validate_only:
        ctx.broker.topics.set_configs(name, configs)
    return ErrorCode.NONE, None


def _replace_all(resource: Any) -> Edit:
    def edit(configs: dict[str, str]) -> str | None:
        configs.clear()
        for c in resource.configs:
            if c.value is None:
                return f"Null value not supported for config {c.name}"
            configs[c.name] = c.value
        return None

    return edit


def _incremental(resource: Any) -> Edit:
    def edit(configs: dict[str, str]) -> str | None:
        for c in resource.configs:
            problem = _apply_op(configs, c.name, c.config_operation, c.value)
            if problem:
                return problem
        return None

    return edit


def _apply_op(configs: dict[str, str], name: str, op: int, value: str | None) -> str | None:
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        return f"Unknown topic config name: {name}"
    if op == DELETE:
        configs.pop(name, None)
        return None
    if value is None:
        return f"Null value not supported for config {name}"
    if op == SET:
        configs[name] = value
        return None
    if op not in (APPEND, SUBTRACT):
        return f"Unknown config operation {op}"
    if definition.type != "list":
        return f"Config {name} is not a list; APPEND/SUBTRACT do not apply"
    current = configs.get(name, format_config_value(parse_config_value(definition, definition.default)))
    items = [v for v in current.split(",") if v]
    for item in value.split(","):
        if op == APPEND and item not in items:
            items.append(item)
        elif op == SUBTRACT and item in items:
            items.remove(item)
    configs[name] = ",".join(items)
    return None


def _alter_all(
    ctx: RequestContext, request: Any, response: Any, edit_for: Callable[[Any], Edit]
) -> Any:
    out = []
    for resource in request.resources:
        error, message = _alter_topic(ctx, resource, edit_for(resource), request.validate_only)
        out.append(response.AlterConfigsResourceResponse(
            error_code=error, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name))
    return response(throttle_time_ms=0, responses=out)


async def handle_alter(ctx: RequestContext, request: Any) -> Any:
    return _alter_all(ctx, request, AlterConfigsResponse, _replace_all)


async def handle_incremental_alter(ctx: RequestContext, request: Any) -> Any:
    return _alter_all(ctx, request, IncrementalAlterConfigsResponse, _incremental)


VERSIONS = {DESCRIBE: (0, 4), ALTER: (0, 2), INCREMENTAL_ALTER: (0, 1)}
HANDLERS = {
    DESCRIBE: handle_describe,
    ALTER: handle_alter,
    INCREMENTAL_ALTER: handle_incremental_alter,
}
