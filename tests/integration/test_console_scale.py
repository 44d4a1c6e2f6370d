"""`gregor console` with 10,000 transactional ids on a real Gregor broker: the whole set is
read within seconds and every page answers in under a second (the pages read the last
snapshot; tests/unit/test_console_model.py renders 10,000 partitions too)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.messages import REQUESTS
from tests.integration import wire
from tests.integration.console_process import ConsoleProcess
from tests.integration.harness import BrokerProcess, wait_until

pytestmark = pytest.mark.integration
IDS = 10_000
FIND_COORDINATOR, INIT_PRODUCER_ID = 10, 22


def init_ids(port: int, count: int) -> None:
    """`count` transactional ids (InitProducerId each, after FindCoordinator has the
    transaction log made), state Empty."""
    with wire.WireClient(port) as c:
        find = REQUESTS[FIND_COORDINATOR](version=1, key="scale-00000", key_type=1)
        wait_until(lambda: c.call(find, 1).error_code == 0, timeout=20, msg="a transaction coordinator")
        for n in range(count):
            init = REQUESTS[INIT_PRODUCER_ID](version=1, transactional_id=f"scale-{n:05d}",
                                              transaction_timeout_ms=60000)
            assert c.call(init, 1).error_code == 0, n


@pytest.fixture(scope="module")
def console(
    module_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    init_ids(module_broker.port, IDS)
    workdir = Path(tmp_path_factory.mktemp("console"))
    c = ConsoleProcess(workdir, module_broker.bootstrap, "--refresh-ms", "2000")
    try:
        yield c
    finally:
        c.stop()
    assert "Traceback" not in c.log(), c.log()


def _total(console: ConsoleProcess) -> int | None:
    """How many transactional ids the console shows; None before its first read ends."""
    answer = console.get("/api/transactions?per_page=1")
    return int(answer.json()["total"]) if answer.status == 200 else None


def test_10000_ids_read_and_every_page_under_a_second(console: ConsoleProcess) -> None:
    started = time.monotonic()
    wait_until(lambda: _total(console) == IDS, timeout=30, interval=0.2, msg=f"{IDS} transactional ids")
    print(f"first snapshot of {IDS} ids within {time.monotonic() - started:.1f} s")
    for path in ("/transactions", "/transactions?q=scale-09&page=3", "/transactions?state=Empty&page=100",
                 "/api/transactions?per_page=1000", "/partitions", "/transactions/scale-04242", "/groups"):
        started = time.monotonic()
        answer = console.get(path)
        took = time.monotonic() - started
        assert answer.status == 200, f"{path}: {answer.status} {answer.body[:300]}"
        assert took < 1.0, f"{path}: {took:.2f} s"
        print(f"{path}: {took * 1000:.0f} ms")
    page = console.api("/transactions", q="scale-0424", per_page=5)
    assert page["total"] == 10 and [t["transactional_id"] for t in page["transactions"]] == [
        f"scale-0424{n}" for n in range(5)]
    assert {t["state"] for t in page["transactions"]} == {"Empty"}
