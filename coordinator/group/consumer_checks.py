"""Kafka's checks of a ConsumerGroupHeartbeat: of the request before the group is looked at
(``request_error``), and of a member's epoch (``check_epoch``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from coordinator.group.consumer_state import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerMember
from coordinator.group.consumer_types import HeartbeatRequest
from coordinator.group.consumer_writer import Refusal
from coordinator.group.reconcile import OwnedReport
from protocol.consumer_group_log import TopicPartitions
from protocol.errors import ErrorCode

_E = ErrorCode


def request_error(req: HeartbeatRequest, assignors: Iterable[str]) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a ConsumerGroupHeartbeat before the group is looked at."""
    if not req.group_id:
        return _E.INVALID_REQUEST, "GroupId can't be empty."
    if req.instance_id == "" or req.rack_id == "":
        return _E.INVALID_REQUEST, "InstanceId and RackId can't be empty."
    if req.member_epoch == 0:
        problem = _join_problem(req)
    elif req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH:
        problem = None
    elif req.member_epoch == STATIC_LEAVE_EPOCH:
        problem = "InstanceId can't be null." if req.instance_id is None else None
    else:
        problem = "MemberEpoch is invalid."
    if problem is None and not req.member_id and (req.api_version >= 1 or req.member_epoch != 0):
        problem = "MemberId can't be empty."
    if problem is not None:
        return _E.INVALID_REQUEST, problem
    if req.server_assignor is not None and req.server_assignor not in assignors:
        return _E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported."
    return _regex_problem(req.subscribed_topic_regex)


def _join_problem(req: HeartbeatRequest) -> str | None:
    if req.rebalance_timeout_ms == -1:
        return "RebalanceTimeoutMs must be provided in first request."
    if req.owned is None or len(req.owned) > 0:
        return "TopicPartitions must be empty when (re-)joining."
    if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
        return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    return None


def _regex_problem(regex: str | None) -> tuple[ErrorCode, str] | None:
    if not regex:
        return None
    try:
        re.compile(regex)
    except re.error as exc:
        return _E.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {regex} is invalid: {exc}"
    return None


def check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
    """Kafka's member epoch check: a member may come back with epoch 0 (KAFKA-19233), or with
    its previous epoch when it owns no more than it is assigned (the answer was lost)."""
    received = req.member_epoch
    if received == 0 or received == member.member_epoch:
        return
    if received > member.member_epoch:
        message = f"The member epoch {received} is ahead of {member.member_epoch}."
        raise Refusal(_E.FENCED_MEMBER_EPOCH, message)
    if received != member.previous_member_epoch or not _is_subset(req.owned, member.assigned):
        message = f"The member epoch {received} is behind {member.member_epoch}."
        raise Refusal(_E.FENCED_MEMBER_EPOCH, message)


def _is_subset(owned: OwnedReport, assigned: TopicPartitions) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(t, frozenset()) for t, ps in owned for p in ps)
