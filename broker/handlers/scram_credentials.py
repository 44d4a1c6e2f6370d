"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554: Describe on
the cluster to list, Alter on the cluster to change (else CLUSTER_AUTHORIZATION_FAILED), the
credentials kept salted in the metadata store, one result per user with Kafka's errors."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin.users import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
)

from broker.security.acl import AclOperation
from broker.security.authorizer import authorize_cluster
from broker.security.scram import ScramCredential, ScramMechanism, credential_problem
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

D = DescribeUserScramCredentialsResponse
A = AlterUserScramCredentialsResponse


def _mechanism(code: int) -> ScramMechanism | None:
    try:
        found = ScramMechanism(code)
    except ValueError:
        return None
    return None if found == ScramMechanism.UNKNOWN else found


# -- DescribeUserScramCredentials --------------------------------------------------------------


async def handle_describe(ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return D(version=ctx.version, throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=None, results=[])
    users = ctx.services.scram.users() if ctx.services.scram is not None else {}
    wanted = [u.name for u in request.users] if request.users else sorted(users)
    twice = {name for name, n in Counter(wanted).items() if n > 1}
    return D(version=ctx.version, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
             results=[_described(name, users.get(name), name in twice) for name in dict.fromkeys(wanted)])


def _described(name: str, infos: list[tuple[ScramMechanism, int]] | None, twice: bool) -> Any:
    R = D.DescribeUserScramCredentialsResult
    if twice:
        return R(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE, credential_infos=[],
                 error_message=f"Cannot describe SCRAM credentials for the same user twice in a single "
                               f"request: {name}")
    if not infos:
        return R(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND, credential_infos=[],
                 error_message=f"Attempt to describe a user credential that does not exist: {name}")
    return R(user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=[
        R.CredentialInfo(mechanism=int(m), iterations=i) for m, i in infos
    ])


# -- AlterUserScramCredentials ------------------------------------------------------------------


async def handle_alter(ctx: RequestContext, request: Any) -> Any:
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not authorize_cluster(ctx, AclOperation.ALTER) or ctx.services.scram is None:
        return _answer(ctx, {n: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for n in names})
    errors = _request_errors(request, names)
    existing = ctx.services.scram.users()
    upserts: dict[tuple[ScramMechanism, str], ScramCredential] = {}
    deletes: list[tuple[ScramMechanism, str]] = []
    for d in request.deletions:
        mechanism = _mechanism(d.mechanism)
        if d.name in errors:
            continue
        if mechanism is None:
            errors[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif mechanism not in {m for m, _ in existing.get(d.name, [])}:
            errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                              "Attempt to delete a user credential that does not exist")
        else:
            deletes.append((mechanism, d.name))
    for u in request.upsertions:
        if u.name in errors:
            continue
        mechanism = _mechanism(u.mechanism)
        if (problem := credential_problem(mechanism, u.iterations)) is not None:
            unknown = mechanism is None
            code = ErrorCode.UNSUPPORTED_SASL_MECHANISM if unknown else ErrorCode.UNACCEPTABLE_CREDENTIAL
            errors[u.name] = (code, problem)
            continue
        assert mechanism is not None
        upserts[(mechanism, u.name)] = ScramCredential.from_salted_password(
            mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations
        )
    await ctx.services.scram.alter(
        {k: c for k, c in upserts.items() if k[1] not in errors}, [k for k in deletes if k[1] not in errors]
    )
    return _answer(ctx, {n: errors.get(n, (ErrorCode.NONE, None)) for n in names})


def _request_errors(request: Any, names: list[str]) -> dict[str, tuple[ErrorCode, str | None]]:
    """Empty names and users altered twice in one request fail as a whole."""
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    for name, n in Counter(names).items():
        if not name:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif n > 1:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE,
                            "A user credential cannot be altered twice in the same request")
    return errors


def _answer(ctx: RequestContext, results: dict[str, tuple[ErrorCode, str | None]]) -> Any:
    R = A.AlterUserScramCredentialsResult
    return A(version=ctx.version, throttle_time_ms=0, results=[
        R(user=name, error_code=code, error_message=message) for name, (code, message) in results.items()
    ])


VERSIONS = {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0), ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0)}
HANDLERS = {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter}
