"""Exactly-once consume-transform-produce across crashes (seed 003's online shop, issue 5).

`purchases` (3 partitions) is turned into `invoices` and `shipments` (2 each)
by tests/integration/eos_processor.py: a read_committed consumer in a group and
a transactional producer that commits the consumed positions with
sendOffsetsToTransaction in the same transaction (confluent-kafka).

- processor crashes: kill -9 at chosen points (mid sends, after sends, after
  sendOffsetsToTransaction, before commit, after commit) and at random times,
  restart with the same transactional.id (fencing its predecessor) many times;
- broker crashes: the broker is kill -9ed and restarted while the processor runs
  (processor restarted when it gives up);
- a zombie: a processor frozen (SIGSTOP) mid-transaction loses its partitions to
  a second processor; when it wakes, its TxnOffsetCommit with the old group
  metadata is rejected and it aborts.

In the end every purchase has exactly one invoice and one shipment in
read_committed, and the group's committed offsets (require_stable) equal the
end offsets of `purchases`.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator

import pytest

from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    require_java,
    unique_topic,
    wait_until,
)
from tests.integration.shop import ProcessorRun, Shop, kill_processors

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _kill_processors() -> Iterator[None]:
    yield
    kill_processors()


OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 5,
    "transaction.state.log.num.partitions": 5,
    "group.min.session.timeout.ms": 1000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
}
# librdkafka's "member was kicked out / stale generation" family on a TxnOffsetCommit
# (Java client, broker transaction.version): 3.9 always takes the TV1 path; 4.3 takes TV2 at level 2
JAVA_LEVELS = [("3.9", 2), ("4.3", 2), ("4.3", 1)]
ZOMBIE_ERRORS = {"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"}


def brokers_log_has_no_tracebacks(broker: BrokerProcess) -> None:
    text = broker.log_text()
    assert "Traceback" not in text, broker.log_tail(80)


# -- tests -----------------------------------------------------------------------------


def seeded_rng() -> random.Random:
    """A random generator seeded from $EOS_SEED (or randomly); the seed is printed to replay a run."""
    seed = int(os.environ.get("EOS_SEED", random.randrange(1 << 30)))
    print(f"EOS_SEED={seed}")
    return random.Random(seed)


CRASH_POINTS = ["mid_sends", "after_sends", "after_send_offsets", "before_commit", "after_commit"]


def test_processor_killed_at_every_point_exactly_once(broker_factory: BrokerFactory) -> None:
    """kill -9 at each crash point (and at random moments), restart, until done: exactly once."""
    rng = seeded_rng()
    broker = broker_factory(OVERRIDES)
    shop = Shop(broker.bootstrap, purchases=400)
    txn_id = unique_topic("shop-processor")

    plan: list[tuple[str, int] | float] = [(p, rng.randint(1, 3)) for p in CRASH_POINTS]
    plan += [(rng.choice(CRASH_POINTS), rng.randint(1, 3)) for _ in range(3)]
    plan += [rng.uniform(0.0, 0.1) for _ in range(2)]  # SIGKILL from outside, a random delay after a commit
    rng.shuffle(plan)

    crashes: list[str] = []
    committed_txns = 0
    for step in plan:
        if isinstance(step, tuple):
            point, n = step
            run = shop.processor(txn_id, {"CRASH_AT": f"{point}:{n}"}, batch=rng.randint(3, 8))
            code = run.wait(60)
            if code == 0:  # caught up before reaching the crash point
                break
            assert code == -signal.SIGKILL, f"processor exited {code}\n{run.transcript()}"
            crash = run.of("crash")
            assert crash and crash[0]["point"] == point, run.transcript()
            crashes.append(f"{point}:{n}")
        else:
            run = shop.processor(txn_id, batch=rng.randint(3, 5))
            try:
                run.wait_event("committed", timeout=30)
            except AssertionError:
                if run.proc.poll() == 0:
                    break
                raise
            time.sleep(step)
            run.kill()
            crashes.append(f"random:{step:.2f}")
        committed_txns += len(run.of("committed"))

    final = shop.processor(txn_id, batch=20)
    assert final.wait(90) == 0, final.transcript()
    assert final.of("done"), final.transcript()
    print(f"crashes: {crashes}; transactions committed before the final run: {committed_txns}")
    assert len(crashes) >= 6, f"only {len(crashes)} crashes happened before the input ran out: {crashes}"
    shop.assert_exactly_once()
    brokers_log_has_no_tracebacks(broker)


def test_broker_killed_mid_run_exactly_once(broker_factory: BrokerFactory) -> None:
    """kill -9 the broker (twice) while the processor runs mid-transaction; restart both as needed."""
    rng = seeded_rng()
    broker = broker_factory(OVERRIDES)
    shop = Shop(broker.bootstrap, purchases=300)
    txn_id = unique_topic("shop-processor")

    # Slow transactions (a pause between the sends and sendOffsets) so the kills land inside one.
    def start() -> ProcessorRun:
        return shop.processor(txn_id, batch=5, txn_sleep_ms=40, max_seconds=120, api_timeout=10)

    runs = [start()]
    # 1st: the broker alone dies and comes back under the running processor;
    # 2nd: the processor dies with it, a new instance (same transactional.id) starts afterwards.
    for round_, kill_after in enumerate((rng.randint(3, 8), rng.randint(3, 8))):
        run = runs[-1]
        base = len(run.of("committed"))
        run.wait_event("committed", base + kill_after, timeout=40)
        broker.kill9()
        if round_ == 1:
            run.kill()
        time.sleep(rng.uniform(0.2, 1.0))
        broker.start()
        if run.proc.poll() is not None:
            runs.append(start())
        # the run must make progress again after the broker is back
        run = runs[-1]
        deadline = time.monotonic() + 45
        progress = len(run.of("committed"))
        while len(run.of("committed")) <= progress:
            if run.proc.poll() is not None:
                if run.proc.returncode == 0:
                    break
                runs.append(run := start())
                progress = 0
            assert time.monotonic() < deadline, f"no progress after the broker restart\n{run.transcript()}"
            time.sleep(0.05)

    # to the end, restarting the processor when it gives up
    for _ in range(5):
        run = runs[-1]
        code = run.wait(120)
        if code == 0:
            break
        runs.append(shop.processor(txn_id, batch=20, max_seconds=120, api_timeout=10))
    assert runs[-1].proc.returncode == 0 and runs[-1].of("done"), runs[-1].transcript()
    errors = [e for r in runs for e in r.of("txn_error")]
    print(f"processor runs: {len(runs)}; transaction errors: {[(e['where'], e['name']) for e in errors]}")
    assert broker.starts == 3
    shop.assert_exactly_once(expect_aborted=False)


def test_zombie_processor_fenced_by_txn_offset_commit(broker_factory: BrokerFactory) -> None:
    """A processor frozen mid-transaction loses its partitions; its stale TxnOffsetCommit is rejected."""
    broker = broker_factory(OVERRIDES)
    shop = Shop(broker.bootstrap, purchases=120)

    # A: commits one transaction, then freezes (SIGSTOP) right after the sends of the 2nd.
    a = shop.processor(unique_topic("shop-a"), {"PAUSE_AT": "after_sends:2"}, batch=10,
                       session_timeout_ms=1500, txn_timeout_ms=60000, idle_exit=1.0)
    paused = a.wait_event("paused", timeout=30)
    assert paused["txn"] == 2
    wait_until(lambda: _stopped(a.proc.pid), timeout=5, msg="A stopped")
    assert len(a.of("committed")) == 1

    # B (another transactional.id) takes over once A's session expires, and finishes the input.
    b = shop.processor(unique_topic("shop-b"), batch=10, session_timeout_ms=1500, idle_exit=1.0)
    try:
        assert b.wait(60) == 0, b.transcript()
        assert shop.committed() == shop.end_offsets()

        # A wakes up and carries on with its transaction: sendOffsetsToTransaction with the
        # group metadata of its old generation must be rejected, and A aborts.
        a.signal(signal.SIGCONT)
        error = a.wait_event("txn_error", timeout=30)
        print(f"zombie's sendOffsetsToTransaction: {error['name']}: {error['str']}")
        assert error["txn"] == 2 and error["where"] == "send_offsets", a.transcript()
        assert error["name"] in ZOMBIE_ERRORS or any(z in error["str"] for z in ZOMBIE_ERRORS), error
        a.wait_event("aborted", timeout=15)
        code = a.wait(60)
        assert code == 0, a.transcript()
        assert len(a.of("committed")) == 1, "the zombie committed a transaction after waking up"
    finally:
        a.kill()
        b.kill()
    shop.assert_exactly_once()
    brokers_log_has_no_tracebacks(broker)


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except FileNotFoundError:
        return False


@pytest.mark.java
@pytest.mark.parametrize(("client", "level"), JAVA_LEVELS)
def test_java_processor_exactly_once(broker_factory: BrokerFactory, client: str, level: int) -> None:
    """The same processor with the Java client: halted mid-transaction twice, then run to the end.
    The 4.3 client takes the transaction version 2 path when the broker finalizes level 2."""
    require_java(client)
    broker = broker_factory({**OVERRIDES, "transaction.version": level})
    shop = Shop(broker.bootstrap, purchases=150)
    txn_id = unique_topic("shop-java")
    for point in ("after_sends:2", "after_send_offsets:2"):
        run = shop.processor(txn_id, {"CRASH_AT": point}, java=client, batch=10)
        code = run.wait(90)
        assert code == 137 and run.of("crash"), f"exit {code}\n{run.transcript()}"
        assert len(run.of("committed")) == 1, run.transcript()
    final = shop.processor(txn_id, java=client, batch=20)
    assert final.wait(90) == 0 and final.of("done"), final.transcript()
    shop.assert_exactly_once()
    brokers_log_has_no_tracebacks(broker)
