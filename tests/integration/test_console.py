"""`gregor console` against a real Gregor broker and a real Apache Kafka 4.4.0, each shared by
the module: its pages and their JSON, fetched over HTTP, show a transaction a real producer
leaves open (state, partitions, LSO lag, the partition's open offset) and then commits; a
hanging transaction flagged by Kafka's find-hanging rules and aborted through the console
with --allow-abort (refused without it, without the form's CSRF token, and for a
transaction that is not hanging); a read_committed group's lag to the LSO beside its lag
to the HW; an unreachable cluster as a message while the console keeps serving.

The hanging transaction is crafted at the byte level (console_clusters.py), stamped an hour
ago: older than the clusters' 15-minute transaction.max.timeout.ms, which the console reads
with DescribeConfigs."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from tests.integration.console_clusters import (
    HOUR_MS,
    SETTINGS,
    Target,
    craft_hanging,
    create_topic,
    produce,
    started_target,
    txn_producer,
)
from tests.integration.console_process import (
    ConsoleProcess,
    console_running,
    lag_shown,
    partition_row,
    running_console,
    shown,
)
from tests.integration.harness import BrokerFactory, free_port, gregor_command, unique_topic

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["gregor", "kafka"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    yield from started_target(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def console(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    yield from running_console(tmp_path_factory.mktemp("console"), target.bootstrap)


@pytest.fixture(scope="module")
def abort_console(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    yield from running_console(tmp_path_factory.mktemp("console-abort"), target.bootstrap, "--allow-abort")


# -- helpers ------------------------------------------------------------------------------


def txn_row(console: ConsoleProcess, txn_id: str) -> dict[str, Any] | None:
    rows = console.api("/transactions", q=txn_id)["transactions"]
    return next((t for t in rows if t["transactional_id"] == txn_id), None)


def abort_fields(topic: str, start_offset: int, token: str) -> dict[str, str]:
    return {"topic": topic, "partition": "0", "start_offset": str(start_offset), "csrf_token": token}


def csrf_token(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def html_row(page: str, attribute: str, value: str) -> str:
    """The `<tr ... attribute="value" ...>...</tr>` of an HTML page."""
    found = re.search(rf'<tr[^>]*{attribute}="{re.escape(value)}"[^>]*>(.*?)</tr>', page, re.S)
    assert found, f"no row {attribute}={value} in the page"
    return found.group(1)


# -- a transaction left open, then committed ---------------------------------------------------


def test_open_transaction_shown_then_committed(
    target: Target, console: ConsoleProcess, abort_console: ConsoleProcess
) -> None:
    topic, txn_id = unique_topic("console-open"), unique_topic("console-tx")
    create_topic(target, topic)
    p = txn_producer(target, txn_id)
    p.begin_transaction()
    produce(p, topic, 3)

    row = shown(console, lambda: (r := txn_row(console, txn_id)) and r["partitions"] and r, "the transaction")
    assert row["state"] == "Ongoing"
    assert row["partitions"] == [{"topic": topic, "partition": 0}]
    assert row["producer_id"] >= 0 and row["producer_epoch"] >= 0
    assert row["transaction_timeout_ms"] == 60000 and 0 <= row["age_ms"] < 60_000

    part = lag_shown(console, topic, 3)
    assert (part["high_watermark"], part["last_stable_offset"]) == (3, 0)
    assert part["holder"]["transactional_id"] == txn_id and part["holder"]["start_offset"] == 0
    assert part["hanging"] == [], "a live transaction is not hanging"

    detail = console.api(f"/transactions/{quote(txn_id, safe='')}")
    assert detail["transaction"]["state"] == "Ongoing"
    assert [(r["topic"], r["open_offset"], r["lso_lag"]) for r in detail["partitions"]] == [(topic, 0, 3)]

    assert console.api("/transactions", q=txn_id, topic=topic)["total"] == 1
    assert console.api("/transactions", q=txn_id, topic="no-such-topic")["total"] == 0
    assert console.api("/transactions", q=txn_id, state="Ongoing", min_age_ms=0)["total"] == 1
    assert console.api("/transactions", q=txn_id, min_age_ms=HOUR_MS)["total"] == 0
    oldest = console.api("/transactions", sort="age", state="Ongoing")["transactions"]
    assert txn_id in [t["transactional_id"] for t in oldest]
    assert [t["age_ms"] for t in oldest] == sorted((t["age_ms"] for t in oldest), reverse=True)

    page = console.get(f"/transactions?q={txn_id}")
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    cells = html_row(page.body, "data-id", txn_id)
    assert "Ongoing" in cells and f"{topic}-0" in cells
    assert txn_id in html_row(console.get(f"/partitions?q={topic}").body, "data-tp", f"{topic}-0")
    detail_page = console.get(f"/transactions/{quote(txn_id, safe='')}").body
    assert re.search(r'class="open-offset">0<', html_row(detail_page, "data-tp", f"{topic}-0"))

    refused = abort_console.get(f"/abort?topic={topic}&partition=0&start_offset=0")
    assert refused.status == 409 and "not hanging" in refused.body

    p.commit_transaction(30)
    row = shown(console, lambda: (r := txn_row(console, txn_id)) and r["state"] == "CompleteCommit" and r,
                "the committed transaction")
    assert row["partitions"] == []
    part = lag_shown(console, topic, 0)
    assert part["high_watermark"] == part["last_stable_offset"] == 4  # three records and the marker
    assert part["holder"] is None
    assert console.api("/transactions", q=txn_id, state="Ongoing")["total"] == 0


# -- a killed producer's transaction, aborted by its coordinator ---------------------------------

KILLED_PRODUCER = """
import sys, time
from confluent_kafka import Producer
bootstrap, txn_id, topic = sys.argv[1:]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0,
              "transaction.timeout.ms": 10000})
p.init_transactions(30)
p.begin_transaction()
for i in range(3):
    p.produce(topic, b"doomed-%d" % i, partition=0)
assert p.flush(20) == 0
print("open", flush=True)
time.sleep(600)
"""


def test_a_killed_producers_transaction_is_shown_until_its_coordinator_aborts_it(
    target: Target, console: ConsoleProcess
) -> None:
    """A producer killed (SIGKILL) inside its transaction, of timeout 10 s: the console shows the
    transaction Ongoing, open for longer than 2 s, holding its partition's LSO, and not hanging
    (its coordinator will end it); then, aborted at its timeout, CompleteAbort and no lag."""
    topic, txn_id = unique_topic("console-killed"), unique_topic("console-killed-tx")
    create_topic(target, topic)
    command = [sys.executable, "-c", KILLED_PRODUCER, target.bootstrap, txn_id, topic]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as producer:
        try:
            assert producer.stdout is not None and producer.stdout.readline().strip() == "open"
        finally:
            producer.kill()
    row = lag_shown(console, topic, 3)
    assert row["holder"]["transactional_id"] == txn_id and row["hanging"] == []
    query = {"q": txn_id, "state": "Ongoing", "min_age_ms": 2000}
    open_long = shown(console, lambda: console.api("/transactions", **query)["transactions"], "open 2 s")
    assert open_long[0]["transaction_timeout_ms"] == 10000

    done = shown(console, lambda: (r := txn_row(console, txn_id)) and r["state"] == "CompleteAbort" and r,
                 "aborted by its coordinator")
    assert done["partitions"] == []
    row = lag_shown(console, topic, 0)
    assert row["high_watermark"] == row["last_stable_offset"] == 4, "three records and the ABORT marker"


# -- a hanging transaction, flagged and aborted ------------------------------------------------


def test_hanging_transaction_flagged_then_aborted(
    target: Target, console: ConsoleProcess, abort_console: ConsoleProcess
) -> None:
    topic = unique_topic("console-hanging")
    pid = craft_hanging(target, topic)

    row = lag_shown(console, topic, 2, hanging=1)
    read = console.api("/partitions", q=topic)
    assert (read["max_transaction_timeout_ms"], read["problems"]) == (900_000, []), "DescribeConfigs read"
    assert (row["high_watermark"], row["last_stable_offset"]) == (3, 1)
    [hanging] = row["hanging"]
    assert (hanging["producer_id"], hanging["start_offset"], hanging["transactional_id"]) == (pid, 1, None)
    assert row["holder"]["producer_id"] == pid
    page = console.get(f"/partitions?q={topic}&hanging=1").body
    assert "HANGING" in html_row(page, "data-tp", f"{topic}-0") and "/abort?" not in page

    target_query = f"/abort?topic={topic}&partition=0&start_offset=1"
    assert console.get(target_query).status == 403, "no abort without --allow-abort"
    assert console.request("/abort", abort_fields(topic, 1, "guess")).status == 403
    assert console.api("/partitions", q=topic)["partitions"][0]["lso_lag"] == 2

    lag_shown(abort_console, topic, 2, hanging=1)
    assert "/abort?" in abort_console.get(f"/partitions?q={topic}").body
    confirm = abort_console.get(target_query)
    assert confirm.status == 200, confirm.body
    assert f"{topic}-0" in confirm.body and str(pid) in confirm.body
    assert "owned by no transactional id" in confirm.body
    described = abort_console.api("/abort", topic=topic, partition=0, start_offset=1)["transaction"]
    assert described["producer_id"] == pid
    assert abort_console.request("/abort", abort_fields(topic, 1, "forged")).status == 403
    still = partition_row(abort_console, topic)
    assert still is not None and still["lso_lag"] == 2 and still["hanging"], still

    done = abort_console.request("/abort", abort_fields(topic, 1, csrf_token(confirm.body)))
    assert done.status == 303, done.body
    assert done.headers["Location"].startswith("/partitions?")
    assert f"aborted the transaction at {topic}-0@1" in abort_console.get(done.headers["Location"]).body
    row = lag_shown(console, topic, 0)
    assert row["high_watermark"] == row["last_stable_offset"] == 4, "the ABORT marker takes offset 3"
    assert row["hanging"] == [] and row["holder"] is None
    assert f"aborted the transaction of producer {pid}" in abort_console.log()
    assert "abort: refused to 127.0.0.1: the form's CSRF token is missing" in abort_console.log()
    again = abort_console.request("/abort", abort_fields(topic, 1, csrf_token(confirm.body)))
    assert again.status == 404


# -- a read_committed group's lag ---------------------------------------------------------------


def test_read_committed_group_lag_to_the_lso(target: Target, console: ConsoleProcess) -> None:
    """Five committed records and their marker (offsets 0-5), then two in an open transaction
    (6-7): a read_committed consumer that read all it can has no lag to the LSO, and 2 to the
    HW (a lag exporter reading the HW reports it); once committed, 3 to both."""
    topic, group = unique_topic("console-lag"), unique_topic("console-group")
    create_topic(target, topic)
    p = txn_producer(target, unique_topic("console-lag-tx"))
    p.begin_transaction()
    produce(p, topic, 5)
    p.commit_transaction(30)
    p.begin_transaction()
    produce(p, topic, 2)
    lag_shown(console, topic, 2)

    assert read_committed(target, topic, group) == 5

    def group_row() -> dict[str, Any] | None:
        rows = [g for g in console.api("/groups", q=group)["groups"] if g["group_id"] == group]
        return rows[0] if rows and rows[0]["partitions"] else None

    g = shown(console, group_row, "the group's committed offset")
    [offset] = g["partitions"]
    assert (offset["committed"], offset["last_stable_offset"], offset["high_watermark"]) == (6, 6, 8)
    assert (offset["lag_to_lso"], offset["lag_to_hw"]) == (0, 2)
    assert (g["lag_to_lso"], g["lag_to_hw"]) == (0, 2)
    cells = html_row(console.get(f"/groups?q={group}").body, "data-tp", f"{topic}-0")
    assert re.search(r'class="lag-lso">0<', cells) and re.search(r'class="lag-hw">2<', cells)

    p.commit_transaction(30)
    g = shown(console, lambda: (r := group_row()) and r["lag_to_lso"] == 3 and r, "lag after the commit")
    assert g["lag_to_hw"] == 3 and g["partitions"][0]["last_stable_offset"] == 9
    history = g["lag_to_lso_history"]
    assert history[-1] == 3 and 0 in history, f"the chart rises from 0 to 3: {history}"


def read_committed(target: Target, topic: str, group: str) -> int:
    """Read partition 0 as a read_committed member of `group` up to its LSO, commit the LSO as
    the group's offset (where such a consumer stands), and say how many records it read."""
    c = Consumer({
        "bootstrap.servers": target.bootstrap, "group.id": group, "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
    })
    try:
        c.assign([CTopicPartition(topic, 0, 0)])
        got, deadline = 0, time.monotonic() + 20
        while got < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got += 1
        _, stable = c.get_watermark_offsets(CTopicPartition(topic, 0), timeout=10, cached=False)
        c.commit(offsets=[CTopicPartition(topic, 0, 6)], asynchronous=False)
        assert stable in (6, 8), stable  # librdkafka asks for the HW or the LSO as it likes
        return got
    finally:
        c.close()


# -- what the console says when it cannot ---------------------------------------------------------


def test_unreachable_cluster_is_a_message_and_the_console_keeps_serving(tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    message = f"cannot read the cluster at {nowhere}"
    with console_running(tmp_path, nowhere, "--timeout-ms", "1000") as console:
        shown(console, partial(_says, console, message), "the message")
        for _ in range(2):
            page = console.get("/transactions")
            assert page.status == 503 and message in page.body, page.body
            api = console.get("/api/partitions")
            assert api.status == 503 and api.json()["error"].startswith(message)
            time.sleep(1.0)
        assert console.proc.poll() is None


def test_a_cluster_gone_and_back_keeps_its_last_snapshot_then_is_read_again(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """A broker stopped under the console: the pages keep the last snapshot with the failure
    above it (200, never a traceback); started again on its port, it is read again."""
    broker = broker_factory(dict(SETTINGS))
    topic = unique_topic("console-gone")
    target = Target("gregor", broker.bootstrap, broker.port)
    create_topic(target, topic)
    message = f"cannot read the cluster at {broker.bootstrap}"
    with console_running(tmp_path, broker.bootstrap, "--timeout-ms", "2000") as console:
        shown(console, lambda: console.get("/api/partitions").status == 200, "the first read")
        shown(console, partial(partition_row, console, topic), "the topic")
        broker.stop()
        shown(console, partial(_says, console, message), "the failure above the last snapshot")
        page = console.get(f"/partitions?q={topic}")
        assert page.status == 200 and f'data-tp="{topic}-0"' in page.body
        assert "showing what was read" in page.body
        assert console.api("/partitions", q=topic)["error"].startswith(message)
        broker.start()
        shown(console, lambda: console.api("/partitions", q=topic)["error"] is None, "read again")
        assert message not in console.get("/transactions").body


def _samples(console: ConsoleProcess, url: str) -> dict[tuple[str, str], float]:
    """The brokers page's samples of `url`, by (name, state label)."""
    brokers = {b["url"]: b for b in console.api("/brokers")["brokers"]}
    return {(s["name"], s["labels"].get("state", "")): s["value"] for s in brokers[url]["samples"]}


def _ongoing(console: ConsoleProcess, url: str) -> dict[tuple[str, str], float] | None:
    """The samples once they count an Ongoing transaction."""
    samples = _samples(console, url)
    return samples if samples.get(("gregor_transactions", "Ongoing"), 0) >= 1 else None


def test_gregors_metrics_on_the_brokers_page(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    """On Gregor, `--metrics-url`: the broker's transaction metrics (an open transaction among
    its transactional ids by state); an endpoint that does not answer is named, not fatal."""
    listener = f"http://127.0.0.1:{free_port()}"
    broker = broker_factory({**SETTINGS, "metrics.listener": listener})
    target = Target("gregor", broker.bootstrap, broker.port)
    topic, txn_id = unique_topic("console-metrics"), unique_topic("console-metrics-tx")
    create_topic(target, topic)
    p = txn_producer(target, txn_id)
    p.begin_transaction()
    produce(p, topic, 1)
    good, gone = f"{listener}/metrics", f"http://127.0.0.1:{free_port()}/metrics"
    with console_running(tmp_path, broker.bootstrap, "--metrics-url", good, "--metrics-url", gone) as console:
        shown(console, lambda: console.get("/api/brokers").status == 200, "the first read")
        samples = shown(console, partial(_ongoing, console, good), "an Ongoing transaction in the metrics")
        assert samples[("gregor_transaction_oldest_age_ms", "Ongoing")] > 0
        missing = next(b for b in console.api("/brokers")["brokers"] if b["url"] == gone)
        assert missing["samples"] == [] and missing["error"].startswith(f"cannot read {gone}")
        page = console.get("/brokers").body
        assert 'href="/brokers"' in page and "gregor_transactions" in page and f"cannot read {gone}" in page
    p.commit_transaction(30)


def _says(console: ConsoleProcess, message: str) -> bool:
    return message in console.get("/transactions").body


def _status(console: ConsoleProcess, path: str, headers: dict[str, str]) -> int:
    return console.request(path, headers=headers).status


def test_a_token_file_makes_every_request_log_in(target: Target, tmp_path: Path) -> None:
    token = "s3cret-console-token-42"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    with console_running(tmp_path / "console", target.bootstrap, "--token-file", str(token_file)) as console:
        page = console.get("/transactions")
        assert page.status == 303 and page.headers["Location"] == "/login"
        assert console.get("/api/transactions").status == 401
        assert console.get("/login").status == 200
        assert console.request("/login", {"token": "guess"}).status == 403
        logged_in = console.request("/login", {"token": token})
        assert logged_in.status == 303 and logged_in.headers["Location"] == "/transactions"
        set_cookie = logged_in.headers["Set-Cookie"]
        assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
        cookie = {"Cookie": set_cookie.split(";")[0]}
        assert shown(console, lambda: _status(console, "/transactions", cookie) == 200, "the page, logged in")
        assert _status(console, "/api/transactions", {"Authorization": f"Bearer {token}"}) == 200
        assert _status(console, "/api/transactions", {"Authorization": "Bearer not-the-token"}) == 401


def gregor_console(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*gregor_command(), "console", "--bootstrap-server", "127.0.0.1:1", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_mistake_on_the_command_line_is_one_line() -> None:
    exposed = gregor_console("--host", "0.0.0.0")
    assert exposed.returncode == 2 and "give --token-file" in exposed.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = gregor_console("--port", str(port))
    assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr, taken.stderr
    no_refresh = gregor_console("--refresh-ms", "0")
    assert no_refresh.returncode == 2 and "must be positive" in no_refresh.stderr
    no_file = gregor_console("--command-config", "/nonexistent/client.properties")
    assert no_file.returncode == 2 and "cannot read --command-config" in no_file.stderr
    short = gregor_console("--token-file", "/dev/null")
    assert short.returncode == 2 and "at least 16 characters" in short.stderr
    outputs = [exposed, taken, no_refresh, no_file, short]
    assert all("Traceback" not in o.stderr and len(o.stderr.splitlines()) == 1 for o in outputs), outputs


def test_bad_requests_are_named(target: Target, console: ConsoleProcess) -> None:
    bad = console.get("/api/transactions?page=two")
    assert bad.status == 400 and "page must be a whole number" in bad.json()["error"]
    assert console.get("/partitions?per_page=0").status == 400
    assert console.get("/api/transactions?sort=size").json()["error"] == "sort must be id or age, got 'size'"
    shown(console, lambda: console.get("/api/transactions").status == 200, "the first read")
    unknown = console.get("/transactions/no-such-transactional-id")
    assert unknown.status == 404 and "no-such-transactional-id" in unknown.body, unknown.body
    assert console.get("/abort?topic=t&partition=0").status == 400
