"""Transaction coordinator: a pure state machine over ``__transaction_state`` records."""

from coordinator.transaction.machine import (
    ListResult,
    MarkerIntent,
    Outcome,
    TransactionStateMachine,
    TxnOperation,
    append_error_to_coordinator_error,
    produce_operation,
    txn_offset_commit_operation,
    write_check_error,
)
from coordinator.transaction.state import (
    MAX_EPOCH,
    VALID_PREVIOUS_STATES,
    IllegalStateTransition,
    TxnMetadata,
    TxnState,
    check_transition,
)

__all__ = [
    "MAX_EPOCH",
    "VALID_PREVIOUS_STATES",
    "IllegalStateTransition",
    "ListResult",
    "MarkerIntent",
    "Outcome",
    "TransactionStateMachine",
    "TxnOperation",
    "TxnMetadata",
    "TxnState",
    "append_error_to_coordinator_error",
    "check_transition",
    "produce_operation",
    "txn_offset_commit_operation",
    "write_check_error",
]
