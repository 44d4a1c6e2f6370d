"""`gregor console` as a test process, and the HTTP calls a test makes to it (urllib: what a
browser sends, without following redirects, so a test sees each answer)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.harness import free_port, gregor_command, wait_until

START_TIMEOUT_S = 30.0
SHOWN_WITHIN_S = 30.0


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class ConsoleProcess:
    """One `gregor console` on a free port, its output in `console.log` of its work dir."""

    def __init__(self, workdir: Path, bootstrap: str, *args: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = workdir / "console.log"
        command = [*gregor_command(), "console", "--bootstrap-server", bootstrap, "--port", str(self.port),
                   "--refresh-ms", "300", "--timeout-ms", "5000", *args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_serving()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gregor console exited with {self.proc.returncode}:\n{self.log()}")
            try:
                self.get("/static/console.css")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"gregor console did not serve within {START_TIMEOUT_S} s:\n{self.log()}")

    def request(self, path: str, data: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> Answer:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        request = urllib.request.Request(self.url + path, data=body, headers=headers or {})
        try:
            with _OPENER.open(request, timeout=30) as r:
                return Answer(r.status, r.read().decode(), dict(r.headers))
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.read().decode(), dict(exc.headers))

    def get(self, path: str) -> Answer:
        return self.request(path)

    def api(self, path: str, **query: object) -> Any:
        """The JSON of `/api<path>?query`, which must answer 200."""
        answer = self.get(f"/api{path}?{urllib.parse.urlencode(query)}")
        assert answer.status == 200, f"{path}: {answer.status} {answer.body}"
        return answer.json()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def running_console(workdir: Path, bootstrap: str, *args: str) -> Iterator[ConsoleProcess]:
    """A fixture's body: a console, stopped at the end; it must have logged no traceback."""
    console = ConsoleProcess(workdir, bootstrap, *args)
    try:
        yield console
    finally:
        console.stop()
    assert "Traceback" not in console.log(), console.log()


def shown(console: ConsoleProcess, find: Any, what: str) -> Any:
    """`find()`'s first truthy answer within SHOWN_WITHIN_S; the console's log on failure."""
    try:
        return wait_until(find, timeout=SHOWN_WITHIN_S, interval=0.2, msg=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- console log ---\n{console.log()[-3000:]}") from None


def partition_row(console: ConsoleProcess, topic: str, **query: object) -> dict[str, Any] | None:
    rows = console.api("/partitions", q=topic, **query)["partitions"]
    return next((p for p in rows if p["topic"] == topic), None)


def lag_shown(console: ConsoleProcess, topic: str, lag: int, **query: object) -> dict[str, Any]:
    """The partition's row once it shows `lag` (each read of a snapshot takes its own moment:
    the LSO, then the HW, then the producers, so a row may show writes half done for one
    refresh)."""
    def find() -> dict[str, Any] | None:
        row = partition_row(console, topic, **query)
        return row if row is not None and row["lso_lag"] == lag else None
    return shown(console, find, f"{topic}-0 with LSO lag {lag}")


def console_running(
    workdir: Path, bootstrap: str, *args: str
) -> contextlib.AbstractContextManager[ConsoleProcess]:
    """`with console_running(...) as console:` for a test's own console."""
    return contextlib.contextmanager(running_console)(workdir, bootstrap, *args)
