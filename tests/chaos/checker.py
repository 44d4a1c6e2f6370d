"""The checker: anomalies in a `History`, as Jepsen's queue and Elle's Kafka checkers name them.

- lost write: acknowledged (a send, a committed transaction), never read, although some
  reader read past its offset;
- duplicate: one value at two offsets (those the kept data shows the client sent again under
  a new producer epoch are counted apart: `set_apart`);
- aborted read: a read_committed reader saw a value whose write definitely failed or whose
  transaction aborted (those the kept data shows the client sent again in its next, committed
  transaction are counted apart: `carried_over`);
- inconsistent offsets: two values at one offset of one partition;
- torn transaction: a transaction's writes seen in part (some read, some passed over);
- precommitted read: a read_committed poll returned a transaction's value before the
  transaction's commit was invoked;
- non-monotonic poll: one consumer read an offset at or below one it read before (without
  being re-assigned in between); skipping poll: it jumped over an offset holding a value
  it should have seen;
- reprocessed: a consume-transform-produce process committed two transactions that consumed
  the same input value (exactly-once broken: the offsets committed with the first were lost);
- G0 / G1c: cycles of transactions over write-write (consecutive writes of a partition, in
  offset order) and write-read (a transaction read another's value) dependencies, as Elle
  infers them from offsets: G0 with write-write edges only, G1c with at least one
  write-read edge. Kafka's transactions do not isolate concurrent writers: two transactions
  open at once may interleave their writes in different orders on two partitions (Jepsen's
  Redpanda and Bufstream analyses; its checker's `--no-ww-deps`). So a write-write edge counts
  only between transactions that did not overlap in real time; the cycles that need an edge
  between overlapping ones are counted apart (`Verdict.interleavings`), not anomalies.

Plus availability: after each fault healed, how long until every producer and every consumer
had made progress again (on every partition it ever progressed on), and the stalls: recoveries
longer than a bound, or none although the history went on for longer than it.
Pure code: no clock, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Set
from dataclasses import dataclass, replace

from tests.chaos.evidence import Batches, Copy, Records
from tests.chaos.history import NO_OFFSET, Fault, History, Key, Kind, Op, Outcome, Read

DRAIN = "drain"  # the process that reads everything at the end (not a client making progress)

ANOMALIES = (
    "lost-write", "duplicate", "aborted-read", "inconsistent-offsets", "torn-transaction",
    "precommitted-read", "non-monotonic-poll", "skipping-poll", "reprocessed", "G0", "G1c",
)
# What a committed value acknowledged as an aborted batch's duplicate shows as (`reused_sequences`)
REUSE_KINDS = ("lost-write", "inconsistent-offsets", "torn-transaction", "skipping-poll")


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    detail: str
    values: tuple[str, ...] = ()  # the values it is about (the missed ones, where some were read)


@dataclass(frozen=True, slots=True)
class Recovery:
    """How long after `fault` healed the slowest producer and the slowest consumer of `topic`
    had each progressed again on every partition it ever progressed on (None: not before the
    history ended, `watched_s` after the heal)."""

    fault: Fault
    topic: str
    producers_s: float | None
    consumers_s: float | None
    watched_s: float = 0.0
    slowest: str = ""  # the process that took longest (or never progressed)

    def stalled(self, bound_s: float) -> bool:
        """Longer than `bound_s`, or never although watched for longer."""
        return any(t > bound_s if t is not None else self.watched_s > bound_s
                   for t in (self.producers_s, self.consumers_s))

    @property
    def took_s(self) -> float:
        """Until the slowest progressed again (if one never did: as long as it was watched)."""
        times = (self.producers_s, self.consumers_s)
        return self.watched_s if None in times else max(t for t in times if t is not None)


@dataclass(frozen=True, slots=True)
class Verdict:
    anomalies: tuple[Anomaly, ...]
    recoveries: tuple[Recovery, ...]
    ops: int
    ok_writes: int
    reads: int
    interleavings: int = 0  # cycles only concurrent transactions' write order makes: allowed
    client_resends: tuple[Anomaly, ...] = ()  # duplicates the client made: see `set_apart`
    client_carryovers: tuple[Anomaly, ...] = ()  # aborted reads the client made: see `carried_over`
    client_reuses: tuple[Anomaly, ...] = ()  # what sequences the client reused made: see `reused_sequences`

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def stalls(self, bound_s: float) -> list[Recovery]:
        return [r for r in self.recoveries if r.stalled(bound_s)]

    def outages(self, bound_s: float) -> list[Recovery]:
        """The stalls, one per outage: a process stuck across several faults' heals stalls
        after each of them until the same moment; the first of those stands for them all."""
        seen: set[tuple[str, str, float]] = set()
        first: list[Recovery] = []
        for r in sorted(self.stalls(bound_s), key=lambda r: r.fault.stop_s):
            outage = (r.topic, r.slowest, round(r.fault.stop_s + r.took_s, 1))
            if outage not in seen:
                seen.add(outage)
                first.append(r)
        return first

    def counts(self) -> dict[str, int]:
        found = {kind: 0 for kind in ANOMALIES}
        for a in self.anomalies:
            found[a.kind] += 1
        return found


def check(history: History) -> Verdict:
    index = _Index(history.ops)
    ww, wr = dependencies(index)
    anomalies = [
        *index.inconsistent_offsets(), *index.duplicates(), *index.lost_writes(),
        *index.aborted_reads(), *index.torn_transactions(), *index.precommitted_reads(),
        *index.poll_order(), *index.reprocessed(), *cycles(index, sequential(index, ww), wr),
    ]
    return Verdict(
        tuple(anomalies), tuple(recoveries(history)), len(history.ops),
        sum(1 for _ in index.acknowledged()), len(index.all_reads),
        sum(1 for _ in cycles(index, ww, wr)) - sum(1 for a in anomalies if a.kind in ("G0", "G1c")),
    )


def set_apart(verdict: Verdict, resent: Set[str], carried: Set[str] = frozenset(),
              reused: Set[str] = frozenset()) -> Verdict:
    """The verdict with the duplicates of `resent` values moved from its anomalies to its
    `client_resends`: values the brokers' data shows stored again by one producer under a
    higher producer epoch (tests.chaos.evidence). Sequences restart with each epoch, so no
    broker, Gregor or Kafka, can tell such a copy from a new message: the client sent it twice.
    The aborted reads of `carried` values (`carried_over`) go to its `client_carryovers`, and
    the anomalies about `reused` values only (`reused_sequences`) to its `client_reuses`."""
    resends = _of_values(verdict.anomalies, "duplicate", resent)
    carryovers = _of_values(verdict.anomalies, "aborted-read", carried)
    reuses = tuple(a for kind in REUSE_KINDS for a in _of_values(verdict.anomalies, kind, reused))
    moved = set(resends) | set(carryovers) | set(reuses)
    return replace(verdict, anomalies=tuple(a for a in verdict.anomalies if a not in moved),
                   client_resends=verdict.client_resends + resends,
                   client_carryovers=verdict.client_carryovers + carryovers,
                   client_reuses=verdict.client_reuses + reuses)


def _of_values(anomalies: Iterable[Anomaly], kind: str, values: Set[str]) -> tuple[Anomaly, ...]:
    return tuple(a for a in anomalies if a.kind == kind and a.values and set(a.values) <= values)


def partitions_of(history: History, verdict: Verdict, kind: str) -> set[str]:
    """The partition dirs ("txn-0") the values of the verdict's anomalies of `kind` were
    written to (an aborted read's, a lost write's)."""
    values = {v for a in verdict.anomalies if a.kind == kind for v in a.values}
    return {_tp(w.key) for op in history.ops for w in op.writes if w.value in values}


def carried_over(history: History, per_broker: Iterable[Batches]) -> set[str]:
    """The values of aborted transactions that every broker holding them keeps in one batch
    with a value of a later, committed transaction of the same client process: the client sent
    them again in that transaction, and no broker can tell them from its own. The Java client
    does that when its sender reads "no batch incomplete" just before an abort queues its
    EndTxn (chaos seed 110; tests/integration/java/AbortRace.java makes it happen)."""
    writer = {w.value: op for op in history.ops for w in op.writes}
    verdicts: dict[str, set[bool]] = defaultdict(set)
    for batches in per_broker:
        for value, mates in batches.items():
            aborted = writer.get(value)
            if aborted is not None and aborted.kind == Kind.TXN and aborted.outcome == Outcome.FAIL:
                verdicts[value].add(any(_committed_after(aborted, writer.get(m)) for m in mates))
    return {value for value, seen in verdicts.items() if seen == {True}}


def _committed_after(aborted: Op, other: Op | None) -> bool:
    return (other is not None and other.kind == Kind.TXN and other.outcome == Outcome.OK
            and other.process == aborted.process and other.invoke_s >= aborted.complete_s)


def reused_sequences(history: History, per_broker: Iterable[Records]) -> set[str]:
    """The acknowledged values that every broker holding their partition stores nowhere, while
    the offset they were acknowledged at holds a value of an earlier, aborted transaction of the
    same client process, in a batch its producer's next batch under the same epoch continues
    the sequences of (so the broker skipped no sequence); with those aborted values.

    The client sent the committed values with the aborted batch's sequences, under the same
    epoch, and the broker answered them as that batch's duplicate, with its offsets, as Kafka's
    does. librdkafka does that when `abort_transaction` purges a batch that was appended but
    whose answer was lost, waiting in its queue for a retry (chaos seed 117;
    tests/differential/test_client_faults.py makes it happen, against Kafka as against Gregor)."""
    writer = {w.value: op for op in history.ops for w in op.writes}
    acked: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for op in history.ops:
        if op.kind in (Kind.SEND, Kind.TXN) and op.outcome == Outcome.OK:
            for w in op.writes:
                acked[_tp(w.key)].append((w.value, w.offset))
    holders: Counter[str] = Counter()  # partition -> the brokers whose data holds it
    verdicts: dict[tuple[str, str], list[str | None]] = defaultdict(list)  # one per holder
    for records in per_broker:
        for partition, stored in records.items():
            holders[partition] += 1
            log = _Stored(stored)
            for value, offset in acked.get(partition, ()):
                if value not in stored:
                    verdicts[(partition, value)].append(log.aborted_batch_at(offset, writer[value], writer))
    found = {value: seen for (partition, value), seen in verdicts.items()
             if None not in seen and len(seen) == holders[partition]}  # a broker holding it disagrees
    return set(found) | {aborted for seen in found.values() for aborted in seen if aborted}


class _Stored:
    """One data dir's records of one partition: the value at each offset, and the batches."""

    def __init__(self, stored: dict[str, list[Copy]]) -> None:
        self.at = {c.offset: (value, c) for value, copies in stored.items() for c in copies}
        self.batches: dict[int, list[Copy]] = defaultdict(list)  # base offset -> its records
        for _, c in self.at.values():
            self.batches[c.batch_base].append(c)

    def aborted_batch_at(self, offset: int, acked: Op, writer: dict[str, Op]) -> str | None:
        """The value at `offset`, if one of an aborted transaction of `acked`'s process that
        ended before `acked` began, in a batch its producer's next continues (else None)."""
        value, c = self.at.get(offset, ("", None))
        aborted = writer.get(value)
        if (c is None or aborted is None or aborted.kind != Kind.TXN or aborted.outcome != Outcome.FAIL
                or aborted.process != acked.process or aborted.complete_s > acked.invoke_s):
            return None
        return value if self._continued(c) else None

    def _continued(self, c: Copy) -> bool:
        """The producer's next batch after `c`'s is under the same epoch and takes the sequence
        after `c`'s batch's last (so the broker appended nothing of that producer's between
        them: a batch it took and lost would have left a gap; under a new epoch, or with no
        next batch, nothing tells)."""
        last = max(r.sequence for r in self.batches[c.batch_base])
        later = [base for base, rs in self.batches.items()
                 if base > c.batch_base and rs[0].producer_id == c.producer_id]
        if not later:
            return False
        nxt = self.batches[min(later)]
        return nxt[0].producer_epoch == c.producer_epoch and min(r.sequence for r in nxt) == last + 1


class _Index:
    """What the history says about each value and offset (built once, read by each check)."""

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops
        self.writer: dict[str, Op] = {w.value: op for op in ops for w in op.writes}
        self.all_reads = [(op, r) for op in ops if op.kind in (Kind.POLL, Kind.TXN) for r in op.reads
                          if op.kind == Kind.POLL or op.outcome == Outcome.OK]
        self.values_at: dict[tuple[Key, int], set[str]] = defaultdict(set)
        self.offsets_of: dict[str, set[tuple[Key, int]]] = defaultdict(set)
        for key, offset, value in self._placements():
            self.values_at[(key, offset)].add(value)
            self.offsets_of[value].add((key, offset))
        self.read_values = {r.value for _, r in self.all_reads}
        self.committed_reads = {r.value for op, r in self.all_reads if op.committed_reader}
        self.max_read: dict[Key, int] = defaultdict(lambda: NO_OFFSET)
        for _, r in self.all_reads:
            self.max_read[r.key] = max(self.max_read[r.key], r.offset)

    def _placements(self) -> Iterator[tuple[Key, int, str]]:
        for op in self.ops:
            if op.outcome == Outcome.OK:
                yield from ((w.key, w.offset, w.value) for w in op.writes if w.offset != NO_OFFSET)
        yield from ((r.key, r.offset, r.value) for _, r in self.all_reads)

    def acknowledged(self) -> Iterator[tuple[Op, str, Key, int]]:
        for op in self.ops:
            if op.kind in (Kind.SEND, Kind.TXN) and op.outcome == Outcome.OK:
                yield from ((op, w.value, w.key, w.offset) for w in op.writes)

    def committed(self, value: str) -> bool:
        """Not known to have failed (what a read_committed reader may see)."""
        op = self.writer.get(value)
        return op is None or op.outcome != Outcome.FAIL

    def known_committed(self, value: str) -> bool:
        """Known to be visible to a read_committed reader: acknowledged, or seen by one (a
        transaction of unknown outcome may have been aborted, and rightly skipped)."""
        op = self.writer.get(value)
        return (op is not None and op.outcome == Outcome.OK) or value in self.committed_reads

    # -- the checks ---------------------------------------------------------------

    def inconsistent_offsets(self) -> Iterator[Anomaly]:
        for (key, offset), found in sorted(self.values_at.items()):
            if len(found) > 1:
                yield Anomaly("inconsistent-offsets", f"{_tp(key)}@{offset}: {sorted(found)}",
                              tuple(sorted(found)))

    def duplicates(self) -> Iterator[Anomaly]:
        for value, where in sorted(self.offsets_of.items()):
            if len(where) > 1:
                yield Anomaly("duplicate", f"{value} at {sorted(f'{_tp(k)}@{o}' for k, o in where)}",
                              (value,))

    def lost_writes(self) -> Iterator[Anomaly]:
        for op, value, key, offset in self.acknowledged():
            if value not in self.read_values and NO_OFFSET < offset < self.max_read[key]:
                yield Anomaly("lost-write", f"{value} acknowledged at {_tp(key)}@{offset} by "
                              f"{op.process}, never read (reads reached {self.max_read[key]})", (value,))

    def aborted_reads(self) -> Iterator[Anomaly]:
        for op, r in self.all_reads:
            if op.committed_reader and not self.committed(r.value):
                yield Anomaly("aborted-read", f"{op.process} read {r.value} at {_tp(r.key)}@{r.offset}, "
                              "whose write failed or aborted", (r.value,))

    def torn_transactions(self) -> Iterator[Anomaly]:
        for op in self.ops:
            if op.kind != Kind.TXN or len(op.writes) < 2:
                continue
            seen = [w for w in op.writes if w.value in self.read_values]
            passed = [w for w in op.writes if w.value not in self.read_values
                      and NO_OFFSET < w.offset < self.max_read[w.key]]
            if seen and passed:
                yield Anomaly("torn-transaction", f"{op.process} {op.outcome}: read "
                              f"{[w.value for w in seen]}, never {[w.value for w in passed]}",
                              tuple(w.value for w in passed))

    def precommitted_reads(self) -> Iterator[Anomaly]:
        for op, r in self.all_reads:
            writer = self.writer.get(r.value)
            if (op.committed_reader and writer is not None and writer.kind == Kind.TXN
                    and writer.commit_s is not None and op.complete_s < writer.commit_s):
                yield Anomaly("precommitted-read", f"{op.process} read {r.value} at {op.complete_s:.3f}, "
                              f"before its transaction's commit at {writer.commit_s:.3f}")

    def poll_order(self) -> Iterator[Anomaly]:
        for process, reads in self._polls_by_consumer().items():
            last: dict[Key, int] = {}
            for op, r in reads:
                if op.kind == Kind.ASSIGN:
                    last.clear()
                    continue
                yield from self._order(process, last.get(r.key), r, op.committed_reader)
                last[r.key] = r.offset

    def reprocessed(self) -> Iterator[Anomaly]:
        consumed: dict[tuple[str, str], Read] = {}
        for op in self.ops:
            if op.kind != Kind.TXN or op.outcome != Outcome.OK:
                continue
            for r in op.reads:
                first = consumed.setdefault((op.process, r.value), r)
                if first is not r:
                    yield Anomaly("reprocessed", f"{op.process} committed two transactions that consumed "
                                  f"{r.value} ({_tp(first.key)}@{first.offset}, then @{r.offset})")

    def _polls_by_consumer(self) -> dict[str, list[tuple[Op, Read]]]:
        found: dict[str, list[tuple[Op, Read]]] = defaultdict(list)
        for op in self.ops:
            if op.kind == Kind.ASSIGN:
                found[op.process].append((op, Read(("", 0), NO_OFFSET, "")))
            elif op.kind == Kind.POLL:
                found[op.process].extend((op, r) for r in op.reads)
        return found

    def _order(self, process: str, before: int | None, r: Read, committed: bool) -> Iterator[Anomaly]:
        if before is None:
            return
        if r.offset <= before:
            yield Anomaly("non-monotonic-poll", f"{process} read {_tp(r.key)}@{r.offset} after @{before}")
            return
        missed = [v for o in range(before + 1, r.offset) for v in self.values_at.get((r.key, o), ())
                  if not committed or self.known_committed(v)]
        if missed:
            yield Anomaly("skipping-poll", f"{process} jumped {_tp(r.key)}@{before} -> @{r.offset} "
                          f"over {sorted(missed)}", tuple(sorted(missed)))


# -- G0 / G1c: Elle's cycles over the transactions' dependencies -------------------------


def cycles(index: _Index, ww: dict[int, set[int]], wr: dict[int, set[int]]) -> Iterator[Anomaly]:
    graph = {a: set(ww.get(a, ())) | set(wr.get(a, ())) for a in set(ww) | set(wr)}
    for component in strongly_connected(graph):
        inner_ww = {a: {b for b in ww.get(a, ()) if b in component} for a in component}
        kind = "G0" if any(strongly_connected(inner_ww, nontrivial_only=True)) else "G1c"
        names = sorted(f"{index.ops[i].process}#{i}" for i in component)
        yield Anomaly(kind, f"cycle over {names}")


def dependencies(index: _Index) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """Write-write edges between consecutive committed writes of each partition, and
    write-read edges from a write's transaction to each transaction that read it."""
    position = {id(op): i for i, op in enumerate(index.ops)}
    writer_at: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for op, _value, key, offset in index.acknowledged():
        if offset != NO_OFFSET:
            writer_at[key].append((offset, position[id(op)]))
    ww: dict[int, set[int]] = defaultdict(set)
    for placed in writer_at.values():
        ordered = [i for _, i in sorted(placed)]
        for a, b in zip(ordered, ordered[1:], strict=False):
            if a != b:
                ww[a].add(b)
    wr: dict[int, set[int]] = defaultdict(set)
    for op, r in index.all_reads:
        writer = index.writer.get(r.value)
        if op.kind == Kind.TXN and writer is not None and writer is not op:
            wr[position[id(writer)]].add(position[id(op)])
    return ww, wr


def sequential(index: _Index, ww: dict[int, set[int]]) -> dict[int, set[int]]:
    """The write-write edges between transactions that did not overlap in real time."""
    ops = index.ops

    def apart(a: int, b: int) -> bool:
        return ops[a].complete_s < ops[b].invoke_s or ops[b].complete_s < ops[a].invoke_s

    return {a: {b for b in bs if apart(a, b)} for a, bs in ww.items()}


def strongly_connected(graph: dict[int, set[int]], nontrivial_only: bool = True) -> list[set[int]]:
    """Tarjan's components (iterative); with `nontrivial_only`, those that hold a cycle."""
    order: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    found: list[set[int]] = []
    for root in list(graph):
        if root not in order:
            _tarjan(graph, root, order, low, stack, on_stack, found)
    return [c for c in found if not nontrivial_only or len(c) > 1
            or any(n in graph.get(n, ()) for n in c)]


def _tarjan(graph: dict[int, set[int]], root: int, order: dict[int, int], low: dict[int, int],
            stack: list[int], on_stack: set[int], found: list[set[int]]) -> None:
    work: list[tuple[int, Iterator[int]]] = [(root, iter(graph.get(root, ())))]
    order[root] = low[root] = len(order)
    stack.append(root)
    on_stack.add(root)
    while work:
        node, edges = work[-1]
        nxt = next(edges, None)
        if nxt is None:
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                found.append(_pop_component(node, stack, on_stack))
        elif nxt not in order:
            order[nxt] = low[nxt] = len(order)
            stack.append(nxt)
            on_stack.add(nxt)
            work.append((nxt, iter(graph.get(nxt, ()))))
        elif nxt in on_stack:
            low[node] = min(low[node], order[nxt])


def _pop_component(node: int, stack: list[int], on_stack: set[int]) -> set[int]:
    component: set[int] = set()
    while True:
        member = stack.pop()
        on_stack.discard(member)
        component.add(member)
        if member == node:
            return component


# -- availability ------------------------------------------------------------------------


def recoveries(history: History) -> Iterator[Recovery]:
    produced, consumed = _Progress(history.ops, _written), _Progress(history.ops, _read)
    topics = sorted(produced.topics | consumed.topics)
    end_s = max((op.complete_s for op in history.ops if op.process != DRAIN), default=0.0)
    for fault in history.faults:
        for topic in topics:
            wrote, read = produced.slowest(topic, fault.stop_s), consumed.slowest(topic, fault.stop_s)
            slowest = max((wrote, read), key=lambda t: float("inf") if t[0] is None else t[0])
            yield Recovery(fault, topic, wrote[0], read[0], max(0.0, end_s - fault.stop_s), slowest[1])


def _written(op: Op) -> Iterable[Key]:
    if op.kind in (Kind.SEND, Kind.TXN) and op.outcome == Outcome.OK:
        yield from (w.key for w in op.writes)


def _read(op: Op) -> Iterable[Key]:
    if op.kind == Kind.POLL and op.process != DRAIN:
        yield from (r.key for r in op.reads)


class _Progress:
    """When each process progressed (wrote or read, as `progress` says) on each partition:
    per topic, process and partition, the completion times in order (built once)."""

    def __init__(self, ops: Iterable[Op], progress: Callable[[Op], Iterable[Key]]) -> None:
        self.times: dict[str, dict[str, dict[Key, list[float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list)))
        for op in ops:
            for key in set(progress(op)):
                self.times[key[0]][op.process][key].append(op.complete_s)
        for processes in self.times.values():
            for keys in processes.values():
                for times in keys.values():
                    times.sort()
        self.topics = set(self.times)

    def slowest(self, topic: str, healed_s: float) -> tuple[float | None, str]:
        """The longest, over the processes, of the seconds from `healed_s` until one had
        progressed again on every partition it ever progressed on (None: one never did), and
        that process."""
        worst: tuple[float | None, str] = (None, "")
        for process, keys in sorted(self.times.get(topic, {}).items()):
            firsts = [times[i] if (i := bisect_left(times, healed_s)) < len(times) else None
                      for times in keys.values()]
            if None in firsts:
                return None, process
            took = max(t for t in firsts if t is not None) - healed_s
            if worst[0] is None or took > worst[0]:
                worst = (took, process)
        return worst


def _tp(key: Key) -> str:
    return f"{key[0]}-{key[1]}"
