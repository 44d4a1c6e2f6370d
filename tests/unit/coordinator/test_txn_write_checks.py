"""Which check a transactional write gets by request version, and the error its client sees
(Kafka's AddPartitionsToTxnManager.*RequestVersionToTransactionSupportedOperation)."""

from __future__ import annotations

import pytest

from coordinator.transaction import (
    TxnOperation,
    produce_operation,
    txn_offset_commit_operation,
    write_check_error,
)
from protocol.errors import ErrorCode as E

OP = TxnOperation


@pytest.mark.parametrize(
    ("version", "operation"),
    [(3, OP.DEFAULT_ERROR), (10, OP.DEFAULT_ERROR), (11, OP.GENERIC_ERROR_SUPPORTED),
     (12, OP.ADD_PARTITION), (13, OP.ADD_PARTITION)],
)
def test_produce_versions(version: int, operation: TxnOperation) -> None:
    assert produce_operation(version) is operation


@pytest.mark.parametrize(
    ("version", "operation"),
    [(0, OP.DEFAULT_ERROR), (3, OP.DEFAULT_ERROR), (4, OP.GENERIC_ERROR_SUPPORTED), (5, OP.ADD_PARTITION)],
)
def test_txn_offset_commit_versions(version: int, operation: TxnOperation) -> None:
    assert txn_offset_commit_operation(version) is operation
    assert operation.adds == (version >= 5)


@pytest.mark.parametrize(
    ("error", "operation", "client_sees"),
    [
        (E.PRODUCER_FENCED, OP.ADD_PARTITION, E.INVALID_PRODUCER_EPOCH),
        (E.PRODUCER_FENCED, OP.DEFAULT_ERROR, E.INVALID_PRODUCER_EPOCH),
        (E.TRANSACTION_ABORTABLE, OP.DEFAULT_ERROR, E.INVALID_TXN_STATE),
        (E.TRANSACTION_ABORTABLE, OP.GENERIC_ERROR_SUPPORTED, E.TRANSACTION_ABORTABLE),
        (E.INVALID_PRODUCER_ID_MAPPING, OP.ADD_PARTITION, E.INVALID_PRODUCER_ID_MAPPING),
        (E.CONCURRENT_TRANSACTIONS, OP.ADD_PARTITION, E.CONCURRENT_TRANSACTIONS),
        (E.NONE, OP.ADD_PARTITION, E.NONE),
    ],
)
def test_write_check_errors(error: E, operation: TxnOperation, client_sees: E) -> None:
    assert write_check_error(error, operation) is client_sees
