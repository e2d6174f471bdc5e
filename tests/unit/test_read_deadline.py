"""The slow-client deadline: which connections are cut, when, and that a complete request is never cut."""

import io
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.helpers import Clock
from webhook.server.read_deadline import BodyReadSignal, ReadDeadlines


@dataclass
class FakeConnection:
    sock: socket.socket
    client: Any = ("10.0.0.7", 51234)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    server, client = socket.socketpair()
    yield server, client
    server.close()
    client.close()


def _in_thread(deadlines: ReadDeadlines, action: str) -> None:
    """arm/disarm are per thread: a worker thread owns the request it is reading."""
    thread = threading.Thread(target=getattr(deadlines, action))
    thread.start()
    thread.join()


def test_a_connection_past_its_deadline_is_shut_down_and_its_blocked_read_returns(
    pair: tuple[socket.socket, socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    server, _client = pair
    clock = Clock()
    deadlines = ReadDeadlines(5.0, clock=clock)
    received: list[bytes] = []
    armed = threading.Event()

    def worker_thread() -> None:
        deadlines.arm(FakeConnection(server))
        armed.set()
        received.append(server.recv(100))  # blocks: the client sends nothing

    thread = threading.Thread(target=worker_thread)
    thread.start()
    assert armed.wait(5)
    clock.now += 4.9
    assert deadlines.expire() == 0
    clock.now += 0.2
    assert deadlines.expire() == 1
    thread.join(timeout=5)
    assert not thread.is_alive() and received == [b""]
    assert deadlines.expired == 1
    assert "client 10.0.0.7:51234 did not send its request within 5s" in caplog.text


def test_a_disarmed_connection_is_never_cut(pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = pair
    clock = Clock()
    deadlines = ReadDeadlines(1.0, clock=clock)
    deadlines.arm(FakeConnection(server))
    deadlines.disarm()
    clock.now += 60
    assert deadlines.expire() == 0
    client.sendall(b"still open")
    assert server.recv(100) == b"still open"


def test_each_thread_has_its_own_deadline(pair: tuple[socket.socket, socket.socket]) -> None:
    server, _client = pair
    clock = Clock()
    deadlines = ReadDeadlines(1.0, clock=clock)
    deadlines.arm(FakeConnection(server))
    _in_thread(deadlines, "disarm")  # another thread finishing its own request does not disarm this one
    clock.now += 2
    assert deadlines.expire() == 1


def test_the_watchdog_thread_cuts_a_slow_connection_on_its_own(pair: tuple[socket.socket, socket.socket]) -> None:
    server, _client = pair
    deadlines = ReadDeadlines(0.2)
    deadlines.start()
    try:
        deadlines.arm(FakeConnection(server))
        server.settimeout(5)
        assert server.recv(100) == b""  # woken by the shutdown well before the 5 s socket timeout
    finally:
        deadlines.stop()


class Recorder:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_body_signal_fires_once_when_the_declared_length_has_been_read() -> None:
    done = Recorder()
    body = BodyReadSignal(io.BytesIO(b'{"kind": "AdmissionReview"}'), 27, done)
    assert body.read(10) == b'{"kind": "'
    assert done.calls == 0
    assert body.read(100) == b'AdmissionReview"}'
    assert done.calls == 1
    assert body.read(100) == b""
    assert done.calls == 1


def test_body_signal_without_length_fires_at_the_end_of_a_chunked_stream() -> None:
    done = Recorder()
    body = BodyReadSignal(io.BytesIO(b"line one\nline two\n"), None, done)
    assert body.readlines() == [b"line one\n", b"line two\n"]
    assert done.calls == 1


def test_body_signal_fires_at_once_for_a_request_without_body() -> None:
    done = Recorder()
    BodyReadSignal(io.BytesIO(b""), 0, done)
    assert done.calls == 1


def test_body_signal_does_not_fire_on_a_zero_byte_read() -> None:
    done = Recorder()
    body = BodyReadSignal(io.BytesIO(b"abc"), None, done)
    assert body.read(0) == b""
    assert done.calls == 0


class CountingClock(Clock):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_the_watchdog_sleeps_while_nothing_is_read_and_wakes_for_the_next_read(
        pair: tuple[socket.socket, socket.socket]) -> None:
    """An idle worker costs no wake-ups (5,000 heartbeating nodes make idle cost count), and the first slow
    client after an idle spell is still cut."""
    server, _client = pair
    clock = CountingClock()
    deadlines = ReadDeadlines(0.2, clock=clock)
    deadlines.start()
    try:
        threading.Event().wait(0.3)  # six watchdog intervals
        assert clock.reads == 0, "nothing was being read: the watchdog did not look"
        deadlines.arm(FakeConnection(server))
        clock.now += 1  # past the deadline
        server.settimeout(5)
        assert server.recv(100) == b""
        for _ in range(100):  # the watchdog counts the cut just after the shutdown that woke us
            if deadlines.expired:
                break
            threading.Event().wait(0.01)
        assert deadlines.expired == 1
        reads = clock.reads
        threading.Event().wait(0.3)
        assert clock.reads - reads <= 1, "asleep again once no connection is being read"
    finally:
        deadlines.stop()
