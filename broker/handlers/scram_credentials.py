"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554: Describe on
the cluster to list, Alter on the cluster to change (else CLUSTER_AUTHORIZATION_FAILED), the
credentials kept salted in the metadata store, one result per user with Kafka's errors."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from kafka.protocol.admin.users import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

from broker.api.authorize import authorize_cluster
from broker.api.registry import Handlers
from broker.security.acl import AclOperation
from broker.security.scram import ScramCredential, ScramMechanism, credential_problem
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

D = DescribeUserScramCredentialsResponse
A = AlterUserScramCredentialsResponse
Deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion
Upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion


def _mechanism(code: int) -> ScramMechanism | None:
    try:
        found = ScramMechanism(code)
    except ValueError:
        return None
    return None if found == ScramMechanism.UNKNOWN else found


# -- DescribeUserScramCredentials --------------------------------------------------------------


async def handle_describe(ctx: RequestContext, request: DescribeUserScramCredentialsRequest) -> D:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return D(version=ctx.version, throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=None, results=[])
    users = ctx.services.scram.users() if ctx.services.scram is not None else {}
    wanted = [u.name for u in request.users] if request.users else sorted(users)
    twice = {name for name, n in Counter(wanted).items() if n > 1}
    results = [_described(name, users.get(name), name in twice) for name in dict.fromkeys(wanted)]
    results.sort(key=lambda r: r.error_code == ErrorCode.NONE)  # Kafka lists the failed ones first
    return D(version=ctx.version, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
             results=results)


def _described(
    name: str, infos: list[tuple[ScramMechanism, int]] | None, twice: bool
) -> D.DescribeUserScramCredentialsResult:
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


async def handle_alter(ctx: RequestContext, request: AlterUserScramCredentialsRequest) -> A:
    """Deletions, then upsertions, each checked in turn as Kafka's controller does: a user's
    first invalid item is its error (the rest of its items are skipped); a second valid item
    for a user is DUPLICATE_RESOURCE and nothing of that user is changed."""
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not authorize_cluster(ctx, AclOperation.ALTER) or ctx.services.scram is None:
        return _answer(ctx, {n: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for n in names})
    existing = ctx.services.scram.users()
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    valid: dict[str, tuple[tuple[ScramMechanism, str], ScramCredential | None]] = {}
    items = [(d, None) for d in request.deletions] + [(u, u) for u in request.upsertions]
    for item, upsertion in items:
        if item.name in errors:
            continue
        problem = _item_problem(item, upsertion, existing)
        if problem is not None:
            errors[item.name] = problem
            valid.pop(item.name, None)
        elif item.name in valid:
            errors[item.name] = (ErrorCode.DUPLICATE_RESOURCE,
                                 "A user credential cannot be altered twice in the same request")
            del valid[item.name]
        else:
            valid[item.name] = _change(item, upsertion)
    upserts = {key: credential for key, credential in valid.values() if credential is not None}
    deletes = [key for key, credential in valid.values() if credential is None]
    await ctx.services.scram.alter(upserts, deletes)
    return _answer(ctx, {n: errors.get(n, (ErrorCode.NONE, None)) for n in names})


def _item_problem(
    item: Deletion | Upsertion, upsertion: Upsertion | None,
    existing: dict[str, list[tuple[ScramMechanism, int]]],
) -> tuple[ErrorCode, str | None] | None:
    mechanism = _mechanism(item.mechanism)
    if not item.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsertion is None:
        if mechanism not in {m for m, _ in existing.get(item.name, [])}:
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        return None
    problem = credential_problem(mechanism, upsertion.iterations)
    return (ErrorCode.UNACCEPTABLE_CREDENTIAL, problem) if problem is not None else None


def _change(
    item: Deletion | Upsertion, upsertion: Upsertion | None
) -> tuple[tuple[ScramMechanism, str], ScramCredential | None]:
    mechanism = _mechanism(item.mechanism)
    assert mechanism is not None
    if upsertion is None:
        return (mechanism, item.name), None
    credential = ScramCredential.from_salted_password(
        mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password), upsertion.iterations
    )
    return (mechanism, item.name), credential


def _answer(ctx: RequestContext, results: dict[str, tuple[ErrorCode, str | None]]) -> A:
    R = A.AlterUserScramCredentialsResult
    return A(version=ctx.version, throttle_time_ms=0, results=[
        R(user=name, error_code=code, error_message=message) for name, (code, message) in results.items()
    ])


VERSIONS = {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0), ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0)}
HANDLERS: Handlers = {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter}
