"""Which hosted partitions' logs cannot be written (a full disk, an I/O error).

One owner per broker (the `ReplicaManager`'s), told by every writer of a log (a
leader's append, a marker, a follower's fetch) whether its write failed or
succeeded. It logs one line per partition and change of state, never per
failed request: a full disk that refuses 130 produces a second logs once, and
once more when space returns. A writer that failed answers KAFKA_STORAGE_ERROR
(or backs off) and keeps serving everything else.
"""

from __future__ import annotations

import logging

from protocol.types import TopicPartition

log = logging.getLogger(__name__)



class WriteFailures:
    def __init__(self) -> None:
        self._failing: dict[TopicPartition, str] = {}

    def failed(self, tp: TopicPartition, exc: OSError) -> bool:
        """Record a failed write; True when the partition was writable until now."""
        reason = exc.strerror or str(exc)
        if tp in self._failing:
            return False
        self._failing[tp] = reason
        log.error("partition %s-%d: cannot write its log (%s): answering KAFKA_STORAGE_ERROR "
                  "until a write succeeds", tp[0], tp[1], reason)
        return True

    def succeeded(self, tp: TopicPartition) -> None:
        """Record a write that succeeded; logs when it ends a failure."""
        reason = self._failing.pop(tp, None)
        if reason is not None:
            log.info("partition %s-%d: its log is writable again (after: %s)", tp[0], tp[1], reason)

    def failing(self, tp: TopicPartition) -> bool:
        return tp in self._failing
