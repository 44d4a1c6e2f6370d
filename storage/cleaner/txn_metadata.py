"""Which transactional batches and markers a cleaning pass may drop (Kafka's
CleanedTransactionMetadata), walked in offset order over the cleaned range."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.record_batch import BatchHeader, ControlRecord, ControlType
from storage.index import AbortedTxn


@dataclass(slots=True)
class _AbortedSeen:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


@dataclass(slots=True)
class TxnMetadata:
    """``aborted``: the aborted transactions overlapping the range, by first offset.
    ``cleaned_index`` collects the aborted entries to keep in the segment being written."""

    aborted: deque[AbortedTxn]
    ongoing_aborted: dict[int, _AbortedSeen] = field(default_factory=dict)
    ongoing_committed: set[int] = field(default_factory=set)
    cleaned_index: list[AbortedTxn] | None = None

    @classmethod
    def of(cls, aborted: Iterable[AbortedTxn]) -> TxnMetadata:
        return cls(deque(sorted(aborted, key=lambda t: t.first_offset)))

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self.aborted and self.aborted[0].first_offset <= offset:
            txn = self.aborted.popleft()
            self.ongoing_aborted.setdefault(txn.producer_id, _AbortedSeen(txn))

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (drop it)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        seen = self.ongoing_aborted.get(header.producer_id)
        if seen is not None:
            seen.last_observed_batch_offset = header.last_offset
            return True
        self.ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, marker: ControlRecord | None) -> bool:
        """A control batch: True when no data of its transaction remains in the range
        walked so far (it may go once its delete horizon has passed)."""
        self._consume_aborted_up_to(header.last_offset)
        if marker is None:
            return True  # an empty control batch: already cleaned
        pid = header.producer_id
        if marker.control_type is ControlType.ABORT:
            seen = self.ongoing_aborted.pop(pid, None)
            if seen is not None and seen.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(seen.txn)
                return False
            return True
        if marker.control_type is ControlType.COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False
