"""Slow clients cannot hold the server's threads: a request must arrive in full within `--read-timeout`.

Each slow client here trickles one byte every 0.2 s, in one of the three phases a request goes through: the
TLS handshake, the request head, and the body. There are three times as many of them as the server has
threads. Without the deadline they hold every thread for as long as they keep trickling, and the
legitimate request below is never answered.
"""

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, running_server

pytestmark = pytest.mark.e2e

WORKERS, THREADS, READ_TIMEOUT = 2, 2, 1.0
PHASES = ("handshake", "head", "body")


def _address(server: RunningServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("https://").split(":")
    return host, int(port)


@dataclass
class SlowClient:
    sock: socket.socket
    rest: bytes = b""
    """What is left to send of a real message, one byte at a time; then filler bytes."""

    def next_byte(self) -> bytes:
        if not self.rest:
            return b"a"
        byte, self.rest = self.rest[:1], self.rest[1:]
        return byte


def _client_hello() -> bytes:
    """A real TLS ClientHello, so the server waits for the rest of it instead of rejecting garbage."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl._create_unverified_context().wrap_bio(incoming, outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _slow_client(server: RunningServer, phase: str) -> SlowClient:
    """A connection stopped part-way through `phase`; the trickle keeps it that way."""
    raw = socket.create_connection(_address(server), timeout=10)
    if phase == "handshake":
        hello = _client_hello()
        raw.sendall(hello[:3])  # the start of the record header; ~100 s of trickle remain
        return SlowClient(raw, hello[3:])
    tls = ssl._create_unverified_context().wrap_socket(raw)
    head = b"POST /mutate HTTP/1.1\r\nHost: placer\r\n"
    if phase == "body":
        head += b"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"
    tls.sendall(head)
    return SlowClient(tls)


class Trickle:
    """Send one byte every 0.2 s on each connection, and note which ones the server has closed."""

    def __init__(self, clients: list[SlowClient]) -> None:
        self.clients = clients
        self.closed: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Trickle":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for client in self.clients:
            client.sock.close()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for index, client in enumerate(self.clients):
                if index in self.closed:
                    continue
                try:
                    client.sock.send(client.next_byte())
                except OSError:
                    self.closed.add(index)


@pytest.fixture
def server(tmp_path: Path, certificates: Any) -> Iterator[RunningServer]:
    extra = ["--workers", str(WORKERS), "--threads", str(THREADS), "--read-timeout", str(READ_TIMEOUT)]
    with running_server(tmp_path, certificates, extra=extra) as running:
        yield running


def _connect(server: RunningServer) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(
        *_address(server), context=ssl.create_default_context(cafile=str(server.ca)), timeout=30)


def _mutate(server: RunningServer, connection: http.client.HTTPSConnection | None = None) -> int:
    """POST one review; on `connection` (kept open) or on a new connection closed afterwards."""
    own = connection is None
    connection = connection or _connect(server)
    try:
        body = json.dumps(fixture_request("pod-bare-create-dryrun"))
        connection.request("POST", "/mutate?timeout=10s", body=body, headers={"Content-Type": "application/json"})
        reply = connection.getresponse()
        reply.read()
        return reply.status
    finally:
        if own:
            connection.close()


def test_slow_clients_in_every_phase_are_cut_off_and_a_real_request_is_answered(server: RunningServer) -> None:
    workers = set(server.worker_pids())
    count = 3 * WORKERS * THREADS
    slow = [_slow_client(server, PHASES[index % len(PHASES)]) for index in range(count)]
    with Trickle(slow) as trickle:
        started = time.monotonic()
        assert _mutate(server) == 200
        answered_after = time.monotonic() - started
        deadline = time.monotonic() + 20
        while len(trickle.closed) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        assert trickle.closed == set(range(count)), "slow clients still connected"
    # Each thread frees itself at most READ_TIMEOUT after taking a slow client, so `count` of them delay a
    # request by about count / (workers * threads) * READ_TIMEOUT; far more would mean they were not cut.
    assert answered_after < 15, answered_after
    assert set(server.worker_pids()) == workers
    assert server.log_text().count("did not send its request within 1s") >= count
    assert _mutate(server) == 200


def test_an_idle_keep_alive_connection_is_not_a_slow_client(server: RunningServer) -> None:
    """The API server keeps connections open between admissions: only a request in progress has a deadline."""
    connection = _connect(server)
    assert _mutate(server, connection) == 200
    time.sleep(3 * READ_TIMEOUT)
    assert _mutate(server, connection) == 200
    assert _mutate(server, connection) == 200
    connection.close()
    assert "did not send its request" not in server.log_text()
