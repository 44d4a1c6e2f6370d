"""The chaos checker on hand-made histories: a clean one passes, and each anomaly the
issue names is found in a history made to contain exactly it."""

from __future__ import annotations

import json

from tests.chaos.checker import (
    Verdict,
    carried_over,
    check,
    partitions_of,
    reused_sequences,
    set_apart,
)
from tests.chaos.evidence import Copy, client_resends
from tests.chaos.history import (
    NO_OFFSET,
    Fault,
    History,
    Kind,
    NoteCounter,
    Op,
    Outcome,
    ProcessId,
    Read,
    Write,
)
from tests.chaos.report import saw

A, B = ("q", 0), ("q", 1)
OK, FAIL, INFO = Outcome.OK, Outcome.FAIL, Outcome.INFO


def send(value: str, offset: int, outcome: Outcome = OK, key: tuple[str, int] = A, at: float = 0.0) -> Op:
    return Op(ProcessId("p1"), Kind.SEND, at, at + 0.01, outcome, (Write(key, value, offset),))


def poll(*reads: tuple[int, str], key: tuple[str, int] = A, who: str = "c1", at: float = 5.0,
         committed: bool = True) -> Op:
    return Op(ProcessId(who), Kind.POLL, at, at + 0.01, OK,
              reads=tuple(Read(key, o, v) for o, v in reads), committed_reader=committed)


def txn(*writes: Write, outcome: Outcome = OK, reads: tuple[Read, ...] = (), who: str = "t1",
        at: float = 1.0, commit_s: float | None = None) -> Op:
    return Op(ProcessId(who), Kind.TXN, at, at + 0.5, outcome, writes, reads, commit_s=commit_s)


def verdict(*ops: Op, faults: tuple[Fault, ...] = ()) -> Verdict:
    return check(History(list(ops), list(faults)))


def found(v: Verdict) -> dict[str, int]:
    return {kind: n for kind, n in v.counts().items() if n}


def test_a_clean_history_is_valid() -> None:
    v = verdict(send("a", 0), send("b", 1), send("c", 2, INFO), send("d", 3, FAIL),
                poll((0, "a"), (1, "b"), (2, "c")), poll((0, "a"), who="c2"), poll((1, "b"), who="c2"))
    assert v.valid, v.anomalies
    assert (v.ops, v.ok_writes, v.reads) == (7, 2, 5)


def test_a_lost_write() -> None:
    v = verdict(send("a", 0), send("b", 1), send("c", 2), poll((0, "a"), (2, "c")))
    assert found(v) == {"lost-write": 1, "skipping-poll": 1}
    assert "b acknowledged at q-0@1" in v.anomalies[0].detail


def test_an_acknowledged_write_beyond_every_read_is_not_lost() -> None:
    assert verdict(send("a", 0), send("b", 1), poll((0, "a"))).valid


def test_a_duplicate() -> None:
    v = verdict(send("a", 0), poll((0, "a"), (1, "a")))
    assert found(v) == {"duplicate": 1}


def copy(offset: int, epoch: int, sequence: int, producer_id: int = 2001) -> Copy:
    return Copy(offset, producer_id, epoch, sequence, leader_epoch=10, batch_base=offset)


def test_a_duplicate_the_data_shows_resent_under_a_new_epoch_is_the_clients() -> None:
    resent = client_resends([
        {"q-0": {"a": [copy(3, 3, 0), copy(1, 2, 1923)], "b": [copy(4, 2, 7), copy(6, 2, 7)],
                 "c": [copy(5, 2, 8), copy(9, 3, 0, producer_id=2002)], "f": [copy(7, 3, 0), copy(8, 2, 9)]}},
        {"q-0": {"a": [copy(1, 2, 1923), copy(3, 2, 1923)]}},  # this broker's copies disagree on "a"
        {"q-1": {"d": [copy(0, 1, 14389), copy(2, 2, 0)]}},
    ])
    # "b": one epoch and sequence twice; "c": two producer ids; "f": the later copy's epoch is older
    assert resent == {"d"}
    v = verdict(send("d", 0), send("e", 1), poll((0, "d"), (1, "e"), (2, "d"), (3, "e")))
    apart = set_apart(v, resent)
    assert found(v) == {"duplicate": 2} and found(apart) == {"duplicate": 1}
    assert [a.values for a in apart.client_resends] == [("d",)] and not apart.valid
    assert set_apart(v, {"d", "e"}).valid


def test_an_aborted_read() -> None:
    aborted = txn(Write(A, "x", 0), outcome=FAIL)
    v = verdict(aborted, send("a", 1), poll((0, "x"), (1, "a")))
    assert found(v) == {"aborted-read": 1}


def test_an_aborted_read_the_data_shows_sent_in_the_next_transaction_is_the_clients() -> None:
    """Seed 110: j1's aborted values, stored in one batch with its next transaction's (the Java
    client's abort race, AbortRace.java), were read when that transaction committed."""
    aborted = [txn(Write(A, v, NO_OFFSET), outcome=FAIL, who="j1", at=at) for v, at in
               (("x", 1.0), ("u", 3.0), ("w", 5.0), ("v", 7.0))]
    later = [txn(Write(A, "y", 1), who="j1", at=2.0), txn(Write(B, "z", 0), who="j2", at=4.0),
             txn(Write(A, "s", 3), who="j1", at=6.0), txn(Write(A, "r", 4), who="j1", at=0.0)]
    reads = [poll(*enumerate("xyusrvw"), at=9.0), poll((0, "z"), key=B, at=9.0)]
    history = History([*aborted, *later, *reads], [])
    v = check(history)
    assert found(v) == {"aborted-read": 4} and partitions_of(history, v, "aborted-read") == {"q-0"}
    batches = {"x": "xy", "u": "uz", "w": "ws", "v": "vr", "y": "xy"}
    carried = carried_over(history, [
        {value: frozenset(mates) for value, mates in batches.items()},
        {"x": frozenset("xy"), "w": frozenset("w")},  # this broker keeps "w" alone
    ])
    # "u": with another process's value; "w": the brokers disagree; "v": with an earlier transaction's
    assert carried == {"x"}
    apart = set_apart(v, set(), carried)
    assert found(apart) == {"aborted-read": 3}
    assert [a.values for a in apart.client_carryovers] == [("x",)] and not apart.client_resends


def rec(offset: int, sequence: int, base: int, epoch: int = 1) -> Copy:
    return Copy(offset, 7, epoch, sequence, leader_epoch=10, batch_base=base)


def reuse_history(aborted_by: str = "x1") -> History:
    """Seed 117 in small: x1's transaction aborted after its batch (a0, a1 at q-0@2-3) was
    appended; its next, committed one was acknowledged at the same offsets for b0, b1 (answered
    as that batch's duplicate), b2 on q-1 was read, and x1's batch after it is c0 at q-0@6."""
    ops = [
        txn(Write(A, "first", 0), who="x1", at=0.0),
        txn(Write(A, "a0", NO_OFFSET), Write(A, "a1", NO_OFFSET), outcome=FAIL, who=aborted_by, at=1.0),
        txn(Write(A, "b0", 2), Write(A, "b1", 3), Write(B, "b2", 0), who="x1", at=2.0),
        txn(Write(A, "c0", 6), who="x1", at=3.0),
        poll((0, "first"), (6, "c0"), at=9.0), poll((0, "b2"), key=B, at=9.0),
        poll((0, "first"), (2, "a0"), (3, "a1"), (6, "c0"), who="u1", at=9.0, committed=False),
    ]
    return History(ops, [])


def stored(next_batch_first_seq: int = 3, next_batch_epoch: int = 1) -> dict[str, dict[str, list[Copy]]]:
    return {"q-0": {"first": [rec(0, 0, 0)], "a0": [rec(2, 1, 2)], "a1": [rec(3, 2, 2)],
                    "c0": [rec(6, next_batch_first_seq, 6, next_batch_epoch)]}}


def test_values_acknowledged_as_an_aborted_batchs_duplicate_are_the_clients() -> None:
    """The anomalies of seed 117 (librdkafka reused the aborted batch's sequences after its
    abort; test_client_faults.py shows Kafka answering the same)."""
    history = reuse_history()
    v = check(history)
    assert found(v) == {"lost-write": 2, "inconsistent-offsets": 2, "skipping-poll": 1, "torn-transaction": 1}
    assert partitions_of(history, v, "lost-write") == {"q-0"}
    reused = reused_sequences(history, [stored(), stored()])
    assert reused == {"b0", "b1", "a0", "a1"}
    apart = set_apart(v, set(), set(), reused)
    assert apart.valid and len(apart.client_reuses) == 6


def test_acknowledged_values_missing_otherwise_stay_anomalies() -> None:
    history = reuse_history()
    # a broker whose producer's next batch skips sequences 3 and 4 (a batch lost, not deduplicated)
    assert reused_sequences(history, [stored(), stored(next_batch_first_seq=5)]) == set()
    # the producer's next batch under a new epoch, or none: nothing tells whether a batch was lost
    assert reused_sequences(history, [stored(next_batch_first_seq=0, next_batch_epoch=2)]) == set()
    no_next = {"q-0": {v: c for v, c in stored()["q-0"].items() if v != "c0"}}
    assert reused_sequences(history, [no_next]) == set()
    # the aborted batch another process's
    assert reused_sequences(reuse_history(aborted_by="x2"), [stored()]) == set()
    # a broker holding the partition stores b0 and b1 (at other offsets)
    holds = {"q-0": {**stored()["q-0"], "b0": [rec(7, 4, 7)], "b1": [rec(8, 5, 7)]}}
    assert reused_sequences(history, [stored(), holds]) == set()
    # the value at the acknowledged offset is the acknowledged one's own
    assert reused_sequences(history, [{"q-0": {**stored()["q-0"], "b0": [rec(2, 1, 2)]}}]) == {"b1", "a1"}


def test_read_uncommitted_may_see_aborted_values() -> None:
    aborted = txn(Write(A, "x", 0), outcome=FAIL)
    assert verdict(aborted, send("a", 1), poll((0, "x"), (1, "a"), committed=False)).valid


def test_inconsistent_offsets() -> None:
    v = verdict(send("a", 0), send("b", 1), poll((0, "a"), (1, "b")), poll((0, "a"), (1, "z"), who="c2"))
    assert found(v)["inconsistent-offsets"] == 1


def test_a_torn_transaction() -> None:
    t = txn(Write(A, "x", 0), Write(B, "y", 0))
    v = verdict(t, send("a", 1), send("b", 1, key=B), poll((0, "x"), (1, "a")), poll((1, "b"), key=B))
    assert found(v) == {"torn-transaction": 1, "lost-write": 1}


def test_a_precommitted_read() -> None:
    t = txn(Write(A, "x", 0), at=1.0, commit_s=9.0)
    v = verdict(t, poll((0, "x"), at=5.0))
    assert found(v) == {"precommitted-read": 1}


def test_a_non_monotonic_poll_and_a_reassignment() -> None:
    v = verdict(send("a", 0), send("b", 1), poll((0, "a"), (1, "b")), poll((1, "b"), at=6.0))
    assert found(v) == {"non-monotonic-poll": 1}
    reset = Op(ProcessId("c1"), Kind.ASSIGN, 5.5, 5.5, OK)
    assert verdict(send("a", 0), send("b", 1), poll((0, "a"), (1, "b")), reset, poll((1, "b"), at=6.0)).valid


def test_a_skipping_poll_but_not_over_aborted_records() -> None:
    v = verdict(send("a", 0), send("b", 1), send("c", 2), poll((0, "a"), (2, "c")), poll((1, "b"), who="c2"))
    assert found(v) == {"skipping-poll": 1}
    aborted = txn(Write(A, "x", 1), outcome=FAIL)
    assert verdict(send("a", 0), aborted, send("c", 2), poll((0, "a"), (2, "c")),
                   poll((1, "x"), who="c3", committed=False)).valid


def test_a_committed_reader_may_skip_a_transaction_of_unknown_outcome() -> None:
    unknown = txn(Write(A, "x", 1), outcome=INFO)  # its commit timed out; it was aborted
    seen_uncommitted = poll((1, "x"), who="tu", committed=False)
    assert verdict(send("a", 0), unknown, send("c", 2), poll((0, "a"), (2, "c")), seen_uncommitted).valid
    seen_committed = poll((1, "x"), who="tc")  # but if another committed reader saw it, it committed
    v = verdict(send("a", 0), unknown, send("c", 2), poll((0, "a"), (2, "c")), seen_committed)
    assert found(v) == {"skipping-poll": 1}


def test_g0_a_write_cycle() -> None:
    t1 = txn(Write(A, "x1", 0), Write(B, "y1", 1), who="t1")
    t2 = txn(Write(A, "x2", 1), Write(B, "y2", 0), who="t2", at=2.0)  # after t1 ended
    v = verdict(t1, t2, poll((0, "x1"), (1, "x2")), poll((0, "y2"), (1, "y1"), key=B))
    assert found(v) == {"G0": 1}


def test_concurrent_transactions_may_interleave_their_writes() -> None:
    t1 = txn(Write(A, "x1", 0), Write(B, "y1", 1), who="t1")
    t2 = txn(Write(A, "x2", 1), Write(B, "y2", 0), who="t2", at=1.2)  # both open at once
    v = verdict(t1, t2, poll((0, "x1"), (1, "x2")), poll((0, "y2"), (1, "y1"), key=B))
    assert v.valid and v.interleavings == 1


def test_g1c_a_write_read_cycle() -> None:
    t1 = txn(Write(A, "x1", 0), who="t1", reads=(Read(B, 0, "y2"),))
    t2 = txn(Write(A, "x2", 1), Write(B, "y2", 0), who="t2", at=2.0)
    v = verdict(t1, t2, poll((0, "x1"), (1, "x2")), poll((0, "y2"), key=B))
    assert found(v) == {"G1c": 1}
    assert "t1" in v.anomalies[0].detail and "t2" in v.anomalies[0].detail


def test_g1c_of_write_read_edges_only_even_between_concurrent_transactions() -> None:
    t1 = txn(Write(A, "x1", 0), who="t1", reads=(Read(B, 0, "y2"),))
    t2 = txn(Write(B, "y2", 0), who="t2", reads=(Read(A, 0, "x1"),), at=1.2)
    v = verdict(t1, t2, poll((0, "x1"),), poll((0, "y2"), key=B))
    assert found(v) == {"G1c": 1} and v.interleavings == 0


def test_serial_transactions_have_no_cycle() -> None:
    t1 = txn(Write(A, "x1", 0), Write(B, "y1", 0), who="t1")
    t2 = txn(Write(A, "x2", 1), Write(B, "y2", 1), who="t2", reads=(Read(A, 0, "x1"),))
    assert verdict(t1, t2, poll((0, "x1"), (1, "x2")), poll((0, "y1"), (1, "y2"), key=B)).valid


def test_availability_after_each_fault() -> None:
    fault = Fault("partition-leader", 1.0, 3.0, "n1")
    never = Fault("pause", 10.0, 20.0, "n2")
    v = verdict(send("a", 0, at=2.0), send("b", 1, at=3.5), send("c", 0, key=B, at=3.9),
                poll((0, "a"), (1, "b"), at=4.0), poll((0, "c"), key=B, at=4.5), faults=(fault, never))
    first, second = v.recoveries  # one topic: every partition progressed again, B last
    assert first.topic == "q"
    assert round(first.producers_s or 0, 3) == 0.91 and round(first.consumers_s or 0, 3) == 1.51
    assert (second.producers_s, second.consumers_s) == (None, None)


def test_availability_is_the_slowest_process() -> None:
    fault = Fault("kill-long", 1.0, 3.0, "n1")
    before = Op(ProcessId("p2"), Kind.SEND, 0.1, 0.2, OK, (Write(A, "y", 9),))
    after = Op(ProcessId("p2"), Kind.SEND, 9.0, 9.5, OK, (Write(A, "z", 2),))
    v = verdict(send("a", 0, at=0.5), send("b", 1, at=3.2), before, after,
                poll((0, "a"), (1, "b"), (2, "z"), at=9.6), faults=(fault,))
    (r,) = v.recoveries
    assert round(r.producers_s or 0, 2) == 6.5  # p2's, p1 was back at 3.21 s
    assert (round(r.consumers_s or 0, 2), r.slowest) == (6.61, "c1")
    assert r.stalled(5.0) and not r.stalled(60.0)


def test_a_stall_is_a_recovery_beyond_the_bound_or_none_watched_longer() -> None:
    stuck = Fault("etcd-down", 1.0, 2.0, "etcd")
    ops = [send("a", 0, at=0.5), Op(ProcessId("p2"), Kind.SEND, 0.1, 0.2, OK, (Write(A, "y", 1),)),
           send("b", 2, at=70.0), poll((0, "a"), (1, "y"), (2, "b"), at=71.0)]
    (r,) = verdict(*ops, faults=(stuck,)).recoveries
    assert (r.producers_s, r.slowest) == (None, "p2") and r.watched_s > 60 and r.stalled(60.0)
    (late,) = verdict(*ops, faults=(Fault("etcd-down", 60.0, 65.0, "etcd"),)).recoveries
    assert late.producers_s is None and not late.stalled(60.0)  # watched for 6 s only


def test_a_process_stuck_across_several_heals_is_one_outage() -> None:
    p2 = [Op(ProcessId("p2"), Kind.SEND, at, at + 0.1, OK, (Write(A, v, o),))
          for at, v, o in ((0.1, "y", 0), (150.0, "z", 4))]  # stuck from 0.2 s to 150.1 s, then for good
    p1 = [send(v, o, at=at) for at, v, o in ((0.5, "a", 1), (2.5, "b", 2), (10.5, "c", 3),
                                              (161.0, "d", 5), (240.0, "e", 6))]
    polls = [poll((o, v), at=at + 0.5) for at, v, o in ((0.1, "y", 0), (0.5, "a", 1), (2.5, "b", 2),
                                                         (10.5, "c", 3), (150.0, "z", 4), (161.0, "d", 5),
                                                         (240.0, "e", 6))]
    faults = (Fault("pause", 1.0, 2.0, "n1"), Fault("kill", 9.0, 10.0, "n2"),
              Fault("pause", 159.0, 160.0, "n3"))
    v = verdict(*p2, *p1, *polls, faults=faults)
    assert [(r.slowest, round(r.took_s)) for r in v.stalls(60.0)] == [("p2", 148), ("p2", 140), ("p2", 81)]
    assert [r.fault.target for r in v.outages(60.0)] == ["n1", "n3"]  # until 150.1 s; never again


def test_a_value_consumed_by_two_committed_transformations_is_reprocessed() -> None:
    source = txn(Write(A, "x", 0), who="t1")
    first = txn(Write(B, "o1", 0), reads=(Read(A, 0, "x"),), who="x1", at=2.0)
    aborted = txn(Write(B, "o2", 1), reads=(Read(A, 0, "x"),), who="x1", at=3.0, outcome=FAIL)
    again = txn(Write(B, "o3", 2), reads=(Read(A, 0, "x"),), who="x1", at=4.0)
    other_group = txn(Write(B, "o4", 3), reads=(Read(A, 0, "x"),), who="jx", at=5.0)
    reads = (poll((0, "x")), poll((0, "o1"), (2, "o3"), (3, "o4"), key=B))
    assert found(verdict(source, first, aborted, other_group, *reads)) == {}
    v = verdict(source, first, aborted, again, other_group, *reads)
    assert found(v) == {"reprocessed": 1} and "x1" in v.anomalies[0].detail


def test_a_history_round_trips_through_json() -> None:
    t = txn(Write(A, "x", 0), reads=(Read(B, 3, "r"),), commit_s=1.2)
    history = History([t, poll((0, "x"), committed=False)], [Fault("kill", 1.0, 2.0, "n3")])
    assert History.from_json(json.loads(json.dumps(history.to_json()))) == history


def test_notes_are_counted_per_second_and_round_trip() -> None:
    counter = NoteCounter()
    for at in (10.1, 10.5, 10.9, 11.2):
        counter.add("x1", "consume", "_TRANSPORT", f"txn-0: down at {at}", at)
    counter.add("x1", "rebalance", "assigned", "txn-0 txn-1", 10.3)
    notes = counter.notes()
    assert [(n.at_s, n.what, n.count) for n in notes] == [
        (10.0, "consume", 3), (10.0, "rebalance", 1), (11.0, "consume", 1)]
    assert notes[0].detail == "txn-0: down at 10.1"
    history = History([], [], notes)
    assert History.from_json(json.loads(json.dumps(history.to_json()))) == history
    assert History.from_json({"ops": [], "faults": []}).notes == []  # a history from before notes
    assert saw(history.notes_of("x1", 10.5, 30.0), 10.5) == [
        "consume _TRANSPORT x4 (+0-0 s: txn-0: down at 10.1)", "rebalance assigned x1 (+0-0 s: txn-0 txn-1)"]
    assert history.notes_of("t1", 0.0, 30.0) == [] and history.notes_of("x1", 12.5, 30.0) == []
