"""A small threaded TCP proxy that understands Kafka framing, for forcing client retries.

    proxy = KafkaProxy(drop_produce_responses=3).start()   # listens on proxy.port
    broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.target_port = broker.port
    ... client with bootstrap proxy.address ...
    assert proxy.stats.dropped_responses == 3

Each accepted client connection gets its own connection to the broker and two
threads. Client -> broker frames are parsed for their request header (api key,
version, correlation id) and forwarded unchanged. Broker -> client frames are
matched to their request by correlation id; for the first
`drop_produce_responses` Produce responses the proxy closes both sockets
instead of relaying the response, so the broker has appended the batch but the
client never hears about it and must re-send it. With `delay_produce_s`, the
first `delay_produce_responses` Produce responses are held that long before
being relayed (set it above the client's request timeout to force a timeout).

The broker's advertised listener must be the proxy's address, or clients go
straight to the broker after their first Metadata response.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

PRODUCE = 0


@dataclass
class ProxyStats:
    connections: int = 0
    requests: dict[int, int] = field(default_factory=dict)  # api key -> count forwarded
    versions: dict[int, set[int]] = field(default_factory=dict)  # api key -> versions seen
    produce_requests: int = 0
    produce_responses_relayed: int = 0
    dropped_responses: int = 0
    delayed_responses: int = 0


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    if size < 0:
        return None
    payload = _recv_exact(sock, size)
    return None if payload is None else head + payload


class _Pipe:
    """One client connection and its broker connection."""

    def __init__(self, proxy: KafkaProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.pending: dict[int, int] = {}  # correlation id -> api key
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def client_to_broker(self) -> None:
        try:
            while True:
                data = _recv_frame(self.client)
                if data is None:
                    return
                api_key, version, corr = struct.unpack_from(">hhi", data, 4)
                with self.lock:
                    self.pending[corr] = api_key
                self.proxy._count_request(api_key, version)
                self.upstream.sendall(data)
        except OSError:
            return
        finally:
            self.close()

    def broker_to_client(self) -> None:
        try:
            while True:
                data = _recv_frame(self.upstream)
                if data is None:
                    return
                (corr,) = struct.unpack_from(">i", data, 4)
                with self.lock:
                    api_key = self.pending.pop(corr, None)
                if api_key == PRODUCE:
                    action = self.proxy._produce_response_action()
                    if action == "drop":
                        return  # `finally` closes both sides: the response is lost
                    if action == "delay":
                        time.sleep(self.proxy.delay_produce_s)
                self.client.sendall(data)
        except OSError:
            return
        finally:
            self.close()


class KafkaProxy:
    def __init__(
        self,
        target_port: int | None = None,
        *,
        drop_produce_responses: int = 0,
        delay_produce_responses: int = 0,
        delay_produce_s: float = 0.0,
        skip_produce_responses: int = 0,
    ) -> None:
        self.target_port = target_port
        self.drop_produce_responses = drop_produce_responses
        self.delay_produce_responses = delay_produce_responses
        self.delay_produce_s = delay_produce_s
        # Relay this many Produce responses untouched before starting to drop/delay,
        # so the faults hit a producer that already has state on the broker.
        self.skip_produce_responses = skip_produce_responses
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._produce_responses_seen = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.1)  # so the accept loop notices close() promptly
        self.port: int = self._listener.getsockname()[1]
        self._pipes: list[_Pipe] = []
        self._stopped = False
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaProxy:
        self._thread = threading.Thread(target=self._accept_loop, name="kafka-proxy-accept", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> KafkaProxy:
        return self if self._thread else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stopped = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._listener.close()
        for p in list(self._pipes):
            p.close()

    def drop_produce_responses_from_now(self, count: int, after: int = 0) -> None:
        """Drop the `count` Produce responses that come after the next `after` (for a proxy
        that has relayed some already)."""
        with self._lock:
            self.skip_produce_responses = self._produce_responses_seen + after
            self.drop_produce_responses = self.stats.dropped_responses + count

    # -- accounting -------------------------------------------------------------

    def _count_request(self, api_key: int, version: int) -> None:
        with self._lock:
            self.stats.requests[api_key] = self.stats.requests.get(api_key, 0) + 1
            self.stats.versions.setdefault(api_key, set()).add(version)
            if api_key == PRODUCE:
                self.stats.produce_requests += 1

    def _produce_response_action(self) -> str:
        with self._lock:
            self._produce_responses_seen += 1
            n = self._produce_responses_seen - self.skip_produce_responses
            if n >= 1 and self.stats.dropped_responses < self.drop_produce_responses:
                self.stats.dropped_responses += 1
                return "drop"
            if n >= 1 and self.stats.delayed_responses < self.delay_produce_responses:
                self.stats.delayed_responses += 1
                return "delay"
            self.stats.produce_responses_relayed += 1
            return "relay"

    # -- connections -----------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self.target_port is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pipe = _Pipe(self, client, upstream)
            with self._lock:
                self.stats.connections += 1
            self._pipes.append(pipe)
            threading.Thread(target=pipe.client_to_broker, name="proxy-c2b", daemon=True).start()
            threading.Thread(target=pipe.broker_to_client, name="proxy-b2c", daemon=True).start()
