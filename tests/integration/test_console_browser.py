"""`gregor console` in a real browser: Debian's Chromium, headless, driven by Selenium through
Debian's chromedriver (`make chromium`; nothing downloads a browser), against Gregor and
against Apache Kafka 4.4.0. A hanging transaction appears flagged on the partitions page with
its LSO lag chart risen; a read_committed group stands at the LSO with no lag to it; a click on
abort, then on the confirmation page's button, releases the LSO; the group, reading on, has
no lag again. Each page's screenshot is saved under test-output/console/<cluster>/."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.console_clusters import (
    Target,
    craft_hanging,
    create_topic,
    last_stable_offset,
    produce,
    started_target,
    txn_producer,
)
from tests.integration.console_process import ConsoleProcess, lag_shown, running_console, shown
from tests.integration.harness import REPO_ROOT, unique_topic, wait_until

pytestmark = pytest.mark.integration
OUTPUT = REPO_ROOT / "test-output" / "console"


@pytest.fixture(scope="module", params=["gregor", "kafka"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    yield from started_target(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def console(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    yield from running_console(tmp_path_factory.mktemp("console"), target.bootstrap, "--allow-abort")


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail("no Debian chromium / chromedriver on PATH: run `make chromium`")
    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    b = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield b
    finally:
        b.quit()


def screenshot(browser: WebDriver, target: Target, name: str) -> Path:
    path = OUTPUT / target.name / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(path))
    return path


def opened(browser: WebDriver, console: ConsoleProcess, path: str, text: str) -> str:
    """The page at `path` once it shows `text` (reloaded while the console reads on)."""
    def find() -> str | None:
        browser.get(console.url + path)
        page = browser.page_source
        return page if text in page else None
    return str(shown(console, find, f"{text!r} on {path}"))


def cell(browser: WebDriver, tp: str, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, f'tr[data-tp="{tp}"] {css}').text)


def commit_at_the_lso(target: Target, topic: str, group: str) -> None:
    """A read_committed member of `group` that read partition 0 up to the LSO commits where it
    stands: the LSO."""
    c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        c.commit(offsets=[CTopicPartition(topic, 0, last_stable_offset(target, topic))], asynchronous=False)
    finally:
        c.close()


def lag_cells(browser: WebDriver, console: ConsoleProcess, group: str, tp: str, lso: str) -> tuple[str, str]:
    """The group page's lags of `tp` (to the LSO, to the HW) once its lag to the LSO is `lso`."""
    def find() -> tuple[str, str] | None:
        opened(browser, console, f"/groups?q={group}", f'data-tp="{tp}"')
        found = (cell(browser, tp, ".lag-lso"), cell(browser, tp, ".lag-hw"))
        return found if found[0] == lso else None
    return tuple(shown(console, find, f"{group}'s lag to the LSO of {tp} at {lso}"))


def test_hanging_transaction_seen_and_aborted_in_the_browser(
    target: Target, console: ConsoleProcess, browser: WebDriver
) -> None:
    topic, group, txn_id = unique_topic("browser"), unique_topic("browser-group"), unique_topic("browser-tx")
    tp = f"{topic}-0"
    pid = craft_hanging(target, topic)
    commit_at_the_lso(target, topic, group)  # offset 1: where the hanging transaction starts
    live_topic = unique_topic("browser-live")
    create_topic(target, live_topic)
    live = txn_producer(target, txn_id)
    live.begin_transaction()
    produce(live, live_topic, 2)
    lag_shown(console, topic, 2, hanging=1)
    time.sleep(1.0)  # a few more samples of the lag for the chart

    opened(browser, console, f"/partitions?q={topic}", "HANGING")
    assert cell(browser, tp, ".lso-lag") == "2"
    lags = browser.find_element(By.CSS_SELECTOR, f'tr[data-tp="{tp}"] svg.spark').get_attribute("aria-label")
    assert lags is not None and int(lags.split()[-1].split(",")[-1]) == 2, lags
    assert str(pid) in cell(browser, tp, ".holder")
    screenshot(browser, target, "partitions-hanging")

    opened(browser, console, f"/transactions?q={txn_id}", "Ongoing")
    screenshot(browser, target, "transactions")
    browser.find_element(By.LINK_TEXT, txn_id).click()
    wait_until(lambda: "Open from offset" in browser.page_source, timeout=10)
    assert cell(browser, f"{live_topic}-0", ".open-offset") == "0"
    screenshot(browser, target, "transaction")

    assert lag_cells(browser, console, group, tp, "0") == ("0", "2")
    screenshot(browser, target, "groups-before")

    opened(browser, console, f"/partitions?q={topic}", "HANGING")
    browser.find_element(By.CSS_SELECTOR, f'tr[data-tp="{tp}"] a.abort').click()
    wait_until(lambda: "Abort this transaction" in browser.page_source, timeout=10)
    confirm = browser.find_element(By.ID, "confirm").text
    assert f"{topic}-0" in confirm and str(pid) in confirm and "offset 1" in confirm
    screenshot(browser, target, "abort-confirm")
    browser.find_element(By.CSS_SELECTOR, "button.danger").click()
    wait_until(lambda: "/partitions" in browser.current_url, timeout=20)
    assert "aborted the transaction at" in browser.find_element(By.ID, "notice").text

    lag_shown(console, topic, 0)
    opened(browser, console, f"/partitions?q={topic}", f'data-tp="{tp}"')
    assert cell(browser, tp, ".lso-lag") == "0" and "HANGING" not in browser.page_source
    screenshot(browser, target, "partitions-aborted")
    assert f"aborted the transaction of producer {pid}" in console.log()

    # The abort lets the group read on: past the aborted record, the one after it and the marker.
    assert lag_cells(browser, console, group, tp, "3") == ("3", "3")
    commit_at_the_lso(target, topic, group)
    assert lag_cells(browser, console, group, tp, "0") == ("0", "0")
    screenshot(browser, target, "groups-after")
    live.abort_transaction(30)
