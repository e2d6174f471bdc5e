"""Slow clients of every kind leave honest reviews on fresh connections unaffected.

32 hostile connections, eight of each kind: a TLS handshake trickled one byte every 0.2 s (slow handshake),
a request head trickled (slowloris), a body announced and trickled (slow body), and a client that pipelines
100 reviews and never reads the answers (slow reader, its receive window 4 KB). Meanwhile honest reviews on
new connections must be answered as fast as without them: a connection is a task of granian's runtime,
not a thread, and a body is read asynchronously. A request head has `--idle-timeout` to arrive, and its
body then `--read-timeout`: past either the connection is closed (a late body is answered 408 first).
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

WORKERS, READ_TIMEOUT, IDLE_TIMEOUT, PER_KIND = 2, 2.0, 4.0, 8
KINDS = ("handshake", "head", "body", "reader")


def _address(server: RunningServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("https://").split(":")
    return host, int(port)


def _unverified() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _review_request() -> bytes:
    body = json.dumps(fixture_request("pod-bare-create-dryrun")).encode()
    return (b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: placer\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


@dataclass
class SlowClient:
    kind: str
    sock: socket.socket
    rest: bytes = b""
    """What is left to send of a real message, one byte at a time; then filler bytes."""
    received: bytes = b""

    def next_byte(self) -> bytes:
        if not self.rest:
            return b"a"
        byte, self.rest = self.rest[:1], self.rest[1:]
        return byte


def _client_hello() -> bytes:
    """A real TLS ClientHello, so the server waits for the rest of it instead of rejecting garbage."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _unverified().wrap_bio(incoming, outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _slow_client(server: RunningServer, kind: str) -> SlowClient:
    """A connection stopped part-way through its request; the trickle keeps it that way."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if kind == "reader":  # a small window: the answers back up after a few, as they would to a stalled reader
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(10)
    raw.connect(_address(server))
    if kind == "handshake":
        hello = _client_hello()
        raw.sendall(hello[:3])  # the start of the record header
        return SlowClient(kind, raw, hello[3:])
    tls = _unverified().wrap_socket(raw)
    if kind == "reader":
        tls.setblocking(False)
        request, sent = _review_request(), 0
        with contextlib.suppress(BlockingIOError, ssl.SSLWantWriteError):
            for _ in range(100):  # reviews it will never read the answers of (or until the server stops reading)
                tls.send(request)
                sent += 1
        tls.settimeout(10)
        return SlowClient(kind, tls)
    head = b"POST /mutate HTTP/1.1\r\nHost: placer\r\nContent-Type: application/json\r\n"
    if kind == "body":
        head += b"Content-Length: 4096\r\n\r\n{"
    tls.sendall(head)
    return SlowClient(kind, tls)


class Trickle:
    """Send one byte every 0.2 s on each trickling connection, and note which ones the server has closed."""

    def __init__(self, clients: list[SlowClient]) -> None:
        self.clients = clients
        self.closed: dict[int, float] = {}
        self.started = time.monotonic()
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
                if index in self.closed or client.kind == "reader":
                    continue
                try:
                    client.sock.send(client.next_byte())
                except OSError:
                    self._closed(index)
                    continue
                if client.kind != "handshake":
                    self._read_what_came(index, client)

    def _read_what_came(self, index: int, client: SlowClient) -> None:
        client.sock.setblocking(False)
        try:
            data = client.sock.recv(65536)
            if data:
                client.received += data
            else:
                self._closed(index)
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
        except OSError:
            self._closed(index)
        finally:
            if index not in self.closed:
                client.sock.settimeout(10)

    def _closed(self, index: int) -> None:
        self.closed.setdefault(index, time.monotonic() - self.started)


@pytest.fixture
def server(tmp_path: Path, certificates: Any) -> Iterator[RunningServer]:
    extra = ["--workers", str(WORKERS), "--read-timeout", str(READ_TIMEOUT), "--idle-timeout", str(IDLE_TIMEOUT)]
    with running_server(tmp_path, certificates, extra=extra) as running:
        yield running


def _connect(server: RunningServer) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(
        *_address(server), context=ssl.create_default_context(cafile=str(server.ca)), timeout=30)


def _mutate(server: RunningServer, connection: http.client.HTTPSConnection | None = None) -> tuple[int, float]:
    """POST one review, on `connection` (kept open) or on a new connection closed afterwards; its status and
    how long it took, from connecting to the last byte of the answer."""
    own = connection is None
    started = time.monotonic()
    connection = connection or _connect(server)
    try:
        body = json.dumps(fixture_request("pod-bare-create-dryrun"))
        connection.request("POST", "/mutate?timeout=10s", body=body, headers={"Content-Type": "application/json"})
        reply = connection.getresponse()
        reply.read()
        return reply.status, time.monotonic() - started
    finally:
        if own:
            connection.close()


def test_hostile_clients_of_every_kind_leave_honest_reviews_unaffected(server: RunningServer) -> None:
    workers = set(server.worker_pids())
    before = [_mutate(server) for _ in range(10)]
    assert {status for status, _ in before} == {200}
    hostile = [_slow_client(server, KINDS[index % len(KINDS)]) for index in range(PER_KIND * len(KINDS))]
    with Trickle(hostile) as trickle:
        during = []
        while time.monotonic() - trickle.started < READ_TIMEOUT * 1.5:
            during.append(_mutate(server))
        deadline = time.monotonic() + 3 * IDLE_TIMEOUT
        cut = {index for index, client in enumerate(hostile) if client.kind in ("head", "body")}
        while not cut <= trickle.closed.keys() and time.monotonic() < deadline:
            time.sleep(0.1)
        closed = dict(trickle.closed)
    assert {status for status, _ in during} == {200}, during
    # as fast as without them: the slowest honest review is within the noise of a shared machine
    slowest_before, slowest_during = max(t for _, t in before), max(t for _, t in during)
    assert slowest_during < max(0.5, 5 * slowest_before), (before, during)
    assert len(during) >= 10
    assert cut <= closed.keys(), f"slow heads or bodies still connected: {sorted(cut - closed.keys())}"
    assert all(closed[index] < 2 * IDLE_TIMEOUT for index in cut), closed
    for client in hostile:
        if client.kind == "body":
            assert client.received.startswith(b"HTTP/1.1 408"), client.received[:200]
            assert b"did not arrive within 2s" in client.received
    assert set(server.worker_pids()) == workers
    assert _mutate(server)[0] == 200


def test_an_idle_keep_alive_connection_is_not_a_slow_client(server: RunningServer) -> None:
    """The API server keeps connections open between admissions: idle for longer than the body's deadline (but
    less than `--idle-timeout`), a connection still serves the next review."""
    connection = _connect(server)
    assert _mutate(server, connection)[0] == 200
    time.sleep(1.5 * READ_TIMEOUT)
    assert _mutate(server, connection)[0] == 200
    assert _mutate(server, connection)[0] == 200
    connection.close()
