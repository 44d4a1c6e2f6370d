"""Produce: validate per partition, append the batch as received, answer per partition."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kafka.protocol.producer import ProduceResponse

from broker.handlers.resolve import resolve_partition
from broker.replica_manager import Partition
from protocol.errors import ErrorCode
from protocol.record_batch import HEADER_SIZE, BatchHeader
from storage.validator import RecordError

if TYPE_CHECKING:
    from broker.context import RequestContext

log = logging.getLogger(__name__)
API_KEY = 0
FIRST_TV2_PRODUCE = 12
R = ProduceResponse
PartitionResponse = R.TopicProduceResponse.PartitionProduceResponse
RecordErrorEntry = PartitionResponse.BatchIndexAndErrorMessage


def _error(
    index: int, error: ErrorCode, message: str | None = None, record_errors: tuple[RecordError, ...] = ()
) -> Any:
    return PartitionResponse(
        index=index, error_code=error, base_offset=-1, error_message=message,
        record_errors=[
            RecordErrorEntry(batch_index=e.batch_index, batch_index_error_message=e.message)
            for e in record_errors
        ],
    )


def _header(records: bytes) -> BatchHeader | None:
    """The batch header, parsed once for the whole produce path (None when too short:
    the log rejects such records)."""
    return BatchHeader.parse(records) if len(records) >= HEADER_SIZE else None


def _verify_transaction(
    ctx: RequestContext, transactional_id: str | None, part: Partition, header: BatchHeader | None
) -> ErrorCode:
    """KIP-890: a transactional batch must go to a partition of the ongoing transaction,
    so a late write after an abort cannot open a hanging transaction. Produce v12+
    (transaction version 2) adds the partition itself; older clients must have added it."""
    if transactional_id is None or header is None:
        return ErrorCode.NONE  # malformed batches are the log's to reject
    if not header.is_transactional:
        return ErrorCode.NONE
    tp = (part.topic, part.index)
    coordinator = ctx.broker.transactions
    if ctx.version >= FIRST_TV2_PRODUCE:
        return coordinator.add_partition_implicitly(
            transactional_id, header.producer_id, header.producer_epoch, tp
        )
    return coordinator.verify(transactional_id, header.producer_id, header.producer_epoch, tp)


def _append(
    ctx: RequestContext, transactional_id: str | None, topic_data: Any, part_data: Any, acks: int,
    pending: Pending,
) -> Any:
    index = part_data.index
    part, error = resolve_partition(ctx, topic_data, index)
    if part is None:
        return _error(index, error)
    if part.topic.startswith("__"):
        return _error(index, ErrorCode.INVALID_TOPIC_EXCEPTION, "cannot append to internal topic")
    if part_data.records is None:
        return _error(index, ErrorCode.INVALID_RECORD, "produce request has null records")
    header = _header(part_data.records)
    error = _verify_transaction(ctx, transactional_id, part, header)
    if error != ErrorCode.NONE:
        return _error(index, error, "partition is not part of the ongoing transaction")
    if acks == -1 and _in_sync(part) < part.log.config.min_insync_replicas:
        return _error(index, ErrorCode.NOT_ENOUGH_REPLICAS, "fewer in-sync replicas than min.insync.replicas")
    result = ctx.broker.replicas.append(part, part_data.records, ctx.now_ms(), header=header)
    if result.error != ErrorCode.NONE:
        log.info("rejected produce to %s-%d: %s %s", part.topic, index,
                 ErrorCode(result.error).name, result.error_message or "")
        return _error(index, ErrorCode(result.error), result.error_message, result.record_errors)
    response = PartitionResponse(
        index=index, error_code=ErrorCode.NONE, base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time, log_start_offset=result.log_start_offset,
    )
    if acks == -1 and part.log.high_watermark <= result.last_offset:
        pending.append((response, part, part.until_replicated(result.last_offset + 1)))
    return response


def _in_sync(part: Partition) -> int:
    return len(part.leader.isr) if part.leader is not None else 0


Pending = list[tuple[Any, Partition, "asyncio.Future[None]"]]


async def _until_replicated(pending: Pending, timeout_ms: int) -> None:
    """acks=all: each answer waits for the HW to pass its batch (the partition's
    HW moves resolve the futures); what is not replicated in time, or whose
    leadership was lost meanwhile, is answered with the protocol's error."""
    futures = [future for _, _, future in pending]
    await asyncio.wait(futures, timeout=max(timeout_ms, 0) / 1000)
    for response, part, future in pending:
        if not future.done():
            future.cancel()
            response.error_code = ErrorCode.REQUEST_TIMED_OUT
        elif future.exception() is not None:
            response.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif _in_sync(part) < part.log.config.min_insync_replicas:
            response.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if response.error_code != ErrorCode.NONE:
            response.base_offset = -1


async def handle(ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    responses = []
    pending: Pending = []
    for topic_data in request.topic_data:
        if acks not in (-1, 0, 1):
            parts = [_error(p.index, ErrorCode.INVALID_REQUIRED_ACKS) for p in topic_data.partition_data]
        else:
            parts = [
                _append(ctx, request.transactional_id, topic_data, p, acks, pending)
                for p in topic_data.partition_data
            ]
        responses.append(
            R.TopicProduceResponse(
                name=topic_data.name, topic_id=topic_data.topic_id, partition_responses=parts
            )
        )
    if pending:
        await _until_replicated(pending, request.timeout_ms)
    return R(responses=responses, throttle_time_ms=0)


VERSIONS = {API_KEY: (3, 13)}
HANDLERS = {API_KEY: handle}
