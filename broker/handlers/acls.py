"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's AclApis: Describe on the
cluster to list, Alter to change (else CLUSTER_AUTHORIZATION_FAILED); SECURITY_DISABLED
without an authorizer; creations and deletions carried out on the controller (forwarded)."""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from itertools import groupby
from typing import TYPE_CHECKING, TypeVar

from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from broker.api.authorize import authorize_cluster
from broker.api.registry import Handlers
from broker.handlers.forwarding import on_controller
from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.acl_hosts import host_problem
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext
    from broker.api.services import Acls

NO_AUTHORIZER = "No Authorizer is configured on the broker"
E = TypeVar("E", bound=IntEnum)
FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
ToResult = Callable[[ErrorCode, str | None, list[AclBinding]], FilterResult]


def _enum(kind: type[E], value: int) -> E:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


# -- DescribeAcls ---------------------------------------------------------------------------


def _filter(r: DescribeAclsRequest | DeleteAclsRequest.DeleteAclsFilter) -> AclFilter:
    """DescribeAcls' request and each of DeleteAcls' filters have the same fields."""
    return AclFilter(
        _enum(ResourceType, r.resource_type_filter), r.resource_name_filter,
        _enum(PatternType, r.pattern_type_filter), r.principal_filter, r.host_filter,
        _enum(AclOperation, r.operation), _enum(Permission, r.permission_type),
    )


def _described(acls: list[AclBinding]) -> list[DescribeAclsResponse.DescribeAclsResource]:
    R = DescribeAclsResponse
    by_resource = sorted(acls, key=lambda a: (a.resource_type, a.name, a.pattern_type))
    return [
        R.DescribeAclsResource(
            resource_type=rtype, resource_name=name, pattern_type=pattern,
            acls=[R.DescribeAclsResource.AclDescription(
                principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission,
            ) for a in group],
        )
        for (rtype, name, pattern), group in groupby(
            by_resource, key=lambda a: (a.resource_type, a.name, a.pattern_type)
        )
    ]


def _describe_answer(
    error: ErrorCode, message: str | None = None, acls: tuple[AclBinding, ...] = ()
) -> DescribeAclsResponse:
    return DescribeAclsResponse(
        throttle_time_ms=0, error_code=error, error_message=message, resources=_described(list(acls))
    )


async def describe(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return _describe_answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    store = ctx.services.acls
    if store is None:
        return _describe_answer(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    wanted = _filter(request)
    if (problem := wanted.problem()) is not None:
        return _describe_answer(ErrorCode.INVALID_REQUEST, f"The filter has an {problem}")
    return _describe_answer(ErrorCode.NONE, None, tuple(store.describe(wanted)))


# -- CreateAcls ------------------------------------------------------------------------------


def _binding(c: CreateAclsRequest.AclCreation) -> AclBinding:
    return AclBinding(
        _enum(ResourceType, c.resource_type), c.resource_name or "",
        _enum(PatternType, c.resource_pattern_type), c.principal or "", c.host or "",
        _enum(AclOperation, c.operation), _enum(Permission, c.permission_type),
    )


def unbuildable(acl: AclBinding) -> bool:
    """An ACL Kafka cannot even build (a filter value where a value belongs: ANY, MATCH): its
    whole CreateAcls request fails (UNKNOWN_SERVER_ERROR for every creation, as Kafka 4.3)."""
    return (
        acl.resource_type == ResourceType.ANY
        or acl.pattern_type in (PatternType.ANY, PatternType.MATCH)
        or acl.operation == AclOperation.ANY or acl.permission == Permission.ANY
    )


def creation_problem(acl: AclBinding) -> str | None:
    """Why Kafka refuses to store this ACL (INVALID_REQUEST), or None."""
    if acl.resource_type == ResourceType.CLUSTER and acl.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.name:
        return "Invalid empty resource name"
    if ":" not in acl.principal:
        return (f"Could not parse principal from `{acl.principal}` (no colon is present separating "
                "the principal type from the principal name)")
    for label, value in (
        ("resourceType", acl.resource_type), ("patternType", acl.pattern_type),
        ("operation", acl.operation), ("permissionType", acl.permission),
    ):
        if value == 0:
            return f"Invalid {label} UNKNOWN"
    return host_problem(acl.host)  # Kafka 4.4 checks the host last


async def _create(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    R = CreateAclsResponse
    wanted = [_binding(c) for c in request.creations]

    def answer(errors: list[tuple[ErrorCode, str | None]]) -> CreateAclsResponse:
        return R(throttle_time_ms=0, results=[
            R.AclCreationResult(error_code=e, error_message=m) for e, m in errors
        ])

    if not authorize_cluster(ctx, AclOperation.ALTER):
        return answer([(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)] * len(wanted))
    store = ctx.services.acls
    if store is None:
        return answer([(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")] * len(wanted))
    if any(unbuildable(acl) for acl in wanted):
        return answer([(ErrorCode.UNKNOWN_SERVER_ERROR, None)] * len(wanted))
    problems = [creation_problem(acl) for acl in wanted]
    await store.create([acl for acl, p in zip(wanted, problems, strict=True) if p is None])
    return answer([(ErrorCode.NONE, None) if p is None else (ErrorCode.INVALID_REQUEST, p) for p in problems])


# -- DeleteAcls ------------------------------------------------------------------------------


def _deleted(acls: list[AclBinding]) -> list[FilterResult.DeleteAclsMatchingAcl]:
    M = DeleteAclsResponse.DeleteAclsFilterResult.DeleteAclsMatchingAcl
    return [
        M(error_code=ErrorCode.NONE, error_message=None, resource_type=a.resource_type,
          resource_name=a.name, pattern_type=a.pattern_type, principal=a.principal, host=a.host,
          operation=a.operation, permission_type=a.permission)
        for a in acls
    ]


async def _delete(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    R = DeleteAclsResponse
    filters = [_filter(f) for f in request.filters]

    def result(error: ErrorCode, message: str | None, acls: list[AclBinding]) -> FilterResult:
        return R.DeleteAclsFilterResult(error_code=error, error_message=message, matching_acls=_deleted(acls))

    def answer(results: list[FilterResult]) -> DeleteAclsResponse:
        return R(throttle_time_ms=0, filter_results=results)

    if not authorize_cluster(ctx, AclOperation.ALTER):
        return answer([result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, [])] * len(filters))
    store = ctx.services.acls
    if store is None:
        disabled = result(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.", [])
        return answer([disabled] * len(filters))
    return answer(await _delete_valid(store, filters, result))


async def _delete_valid(store: Acls, filters: list[AclFilter], result: ToResult) -> list[FilterResult]:
    problems = [f.problem() for f in filters]
    valid = [f for f, p in zip(filters, problems, strict=True) if p is None]
    found = iter(await store.delete(valid))
    return [
        result(ErrorCode.NONE, None, next(found)) if p is None
        else result(ErrorCode.INVALID_REQUEST, f"The filter has an {p}", [])
        for p in problems
    ]


def _create_not_controller(request: CreateAclsRequest) -> CreateAclsResponse:
    R = CreateAclsResponse
    return R(throttle_time_ms=0, results=[
        R.AclCreationResult(error_code=ErrorCode.NOT_CONTROLLER, error_message=None)
        for _ in request.creations
    ])


def _delete_not_controller(request: DeleteAclsRequest) -> DeleteAclsResponse:
    R = DeleteAclsResponse
    return R(throttle_time_ms=0, filter_results=[
        R.DeleteAclsFilterResult(error_code=ErrorCode.NOT_CONTROLLER, error_message=None, matching_acls=[])
        for _ in request.filters
    ])


VERSIONS = {ApiKey.DESCRIBE_ACLS: (1, 3), ApiKey.CREATE_ACLS: (1, 3), ApiKey.DELETE_ACLS: (1, 3)}
HANDLERS: Handlers = {
    ApiKey.DESCRIBE_ACLS: describe,
    ApiKey.CREATE_ACLS: on_controller(_create, _create_not_controller),
    ApiKey.DELETE_ACLS: on_controller(_delete, _delete_not_controller),
}
