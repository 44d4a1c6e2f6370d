"""How Produce answers a transaction check's error, by request version (Kafka 4.3's
ReplicaManager.handleProduceAppend with AddPartitionsToTxnManager's supported operation)."""

from __future__ import annotations

import pytest

from broker.handlers.produce import produce_error
from protocol.errors import ErrorCode

RETRIABLE = [ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR]


@pytest.mark.parametrize("version", [3, 9, 11, 12, 13])
@pytest.mark.parametrize("error", RETRIABLE)
def test_a_retriable_coordinator_error_is_not_enough_replicas(error: ErrorCode, version: int) -> None:
    assert produce_error(error, version) == (
        ErrorCode.NOT_ENOUGH_REPLICAS,
        f"Unable to verify the partition has been added to the transaction. Underlying error: {error.name}",
    )


def test_concurrent_transactions_reaches_a_transaction_version_2_producer_as_it_is() -> None:
    """Produce v12+ (Kafka's ADD_PARTITION operation, which supports the epoch bump) gets it as
    it is, as Kafka answered the Streams producers of test_streams_eos.py; older ones
    NOT_ENOUGH_REPLICAS, which they retry."""
    assert produce_error(ErrorCode.CONCURRENT_TRANSACTIONS, 12) == (ErrorCode.CONCURRENT_TRANSACTIONS, None)
    assert produce_error(ErrorCode.CONCURRENT_TRANSACTIONS, 13) == (ErrorCode.CONCURRENT_TRANSACTIONS, None)
    assert produce_error(ErrorCode.CONCURRENT_TRANSACTIONS, 11)[0] == ErrorCode.NOT_ENOUGH_REPLICAS


def test_a_partition_not_in_the_transaction_is_invalid_txn_state() -> None:
    assert produce_error(ErrorCode.INVALID_TXN_STATE, 11) == (
        ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction"
    )
