"""Group coordinator: classic groups and offsets as a pure state machine over ``__consumer_offsets``."""

from coordinator.group.machine import GroupCoordinatorMachine
from coordinator.group.state import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupState,
    IllegalStateTransition,
    Member,
)
from coordinator.group.types import (
    Completion,
    DescribedGroup,
    FetchedOffset,
    GroupConfig,
    JoinRequest,
    JoinResponse,
    Kind,
    LeaveMember,
    LeaveResponse,
    ListedGroup,
    OffsetCommitInput,
    OffsetDeleteResult,
    OffsetFetchResult,
    Result,
    SyncRequest,
    SyncResponse,
)

__all__ = [
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "Completion",
    "DescribedGroup",
    "FetchedOffset",
    "GroupConfig",
    "GroupCoordinatorMachine",
    "GroupState",
    "IllegalStateTransition",
    "JoinRequest",
    "JoinResponse",
    "Kind",
    "LeaveMember",
    "LeaveResponse",
    "ListedGroup",
    "Member",
    "OffsetCommitInput",
    "OffsetDeleteResult",
    "OffsetFetchResult",
    "Result",
    "SyncRequest",
    "SyncResponse",
]
