"""Idle connections are waited on by the serving threads themselves (server/parking.py, server/worker.py).

A parked connection goes to exactly one waiting thread when its request comes, and is not reported again
until it is parked again; one whose request was read with the last one takes its turn after those the
socket reports; the main thread can take out the ones idle past their timeout. The worker test runs
Placer's serving thread with no gunicorn main loop at all: requests on a kept-alive connection are
answered without it, and only closing a connection goes through it (as gunicorn closes).
"""

import socket
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from gunicorn.workers.gthread import TConn

from tests.unit.test_review_shortcut import _read_response, _worker, post
from webhook.server.parking import ParkingLot


@dataclass(eq=False)
class Parked:
    sock: socket.socket
    timeout: float = 0.0


@pytest.fixture
def lot() -> Iterator[tuple[ParkingLot, Any]]:
    parking = ParkingLot()
    opened: list[socket.socket] = []

    def pair() -> tuple[Parked, socket.socket]:
        server_side, client_side = socket.socketpair()
        opened.extend([server_side, client_side])
        return Parked(server_side), client_side

    yield parking, pair
    parking.close()
    for sock in opened:
        sock.close()


def test_a_parked_connection_goes_to_one_thread_once_its_request_comes(lot: Any) -> None:
    parking, pair = lot
    conn, client = pair()
    parking.park(conn, time.monotonic() + 60)
    assert parking.next_ready(0.05) is None  # nothing sent yet
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert parking.next_ready(1.0) is conn
    assert parking.next_ready(0.05) is None  # still unread, but taken: not reported again until parked
    conn.sock.recv(100)
    parking.park(conn, time.monotonic() + 60)
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert parking.next_ready(1.0) is conn


def test_requests_on_several_connections_each_go_to_one_of_the_waiting_threads(lot: Any) -> None:
    parking, pair = lot
    connections = [pair() for _ in range(6)]
    for conn, _ in connections:
        parking.park(conn, time.monotonic() + 60)
    taken: list[Any] = []
    lock = threading.Lock()

    def serve() -> None:
        while (conn := parking.next_ready(0.3)) is not None:
            with lock:
                taken.append(conn)

    threads = [threading.Thread(target=serve) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _, client in connections:
        client.sendall(b"x")
    for thread in threads:
        thread.join(5)
    assert sorted(map(id, taken)) == sorted(id(conn) for conn, _ in connections)  # each once, none twice


def test_a_client_closing_its_connection_wakes_a_thread(lot: Any) -> None:
    parking, pair = lot
    conn, client = pair()
    parking.park(conn, time.monotonic() + 60)
    client.close()
    assert parking.next_ready(1.0) is conn  # which reads the end and closes it


def test_a_request_read_with_the_last_one_takes_its_turn_after_the_ones_waiting(lot: Any) -> None:
    parking, pair = lot
    waiting, client = pair()
    buffered, _ = pair()
    parking.park(waiting, time.monotonic() + 60)
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    time.sleep(0.05)
    parking.park_buffered(buffered)
    assert len(parking) == 2
    assert parking.next_ready(1.0) is waiting
    assert parking.next_ready(1.0) is buffered
    assert parking.next_ready(0.0) is None


def test_idle_connections_are_taken_out_when_their_timeout_passes(lot: Any) -> None:
    parking, pair = lot
    old, old_client = pair()
    fresh, _ = pair()
    buffered, _ = pair()
    parking.park(old, 100.0)
    parking.park(fresh, 200.0)
    parking.park_buffered(buffered)
    assert parking.expired(150.0) == [old]
    old_client.sendall(b"late")
    assert parking.next_ready(0.05) is buffered  # the expired one is no longer waited on
    parking.park_buffered(buffered)
    parking.cap_timeouts(120.0)  # a stopping worker
    assert fresh.timeout == 120.0
    assert set(map(id, parking.expired())) == {id(fresh), id(buffered)}  # all, as the worker stops
    assert len(parking) == 0


def test_a_forgotten_connection_is_not_waited_on(lot: Any) -> None:
    parking, pair = lot
    conn, client = pair()
    parking.park(conn, time.monotonic() + 60)
    parking.forget(conn)
    client.sendall(b"x")
    assert parking.next_ready(0.05) is None and len(parking) == 0


def test_the_serving_thread_answers_kept_alive_requests_without_the_main_loop() -> None:
    worker = _worker()
    worker.method_queue.init()
    worker.connections = weakref.WeakSet()  # what init_process makes in a worker process
    worker.serving = True
    server_side, client = socket.socketpair()
    client.settimeout(10)
    conn = TConn(worker.cfg, server_side, ("127.0.0.1", 40000), ("127.0.0.1", 8443))
    serving = threading.Thread(target=worker._serve_parked, daemon=True)
    serving.start()
    try:
        worker.enqueue_req(conn)  # what gunicorn's accept does with a new connection
        for _ in range(3):
            client.sendall(post())
            answer = _read_response(client)
            assert answer.startswith(b"HTTP/1.1 200 OK") and b"Connection: keep-alive" in answer
        client.sendall(post(headers="Connection: close\r\n"))
        assert b"Connection: close" in _read_response(client)
        for _ in range(100):  # the close is handed to the main thread, as gunicorn closes connections
            if worker.method_queue._queue.qsize():
                break
            time.sleep(0.01)
        worker.nr_conns = 1
        worker.method_queue.run_callbacks(None)
        assert worker.nr_conns == 0 and client.recv(10) == b""
        assert worker.nr == 4 and len(worker.parking) == 0
    finally:
        worker.serving = False
        serving.join(5)
        worker.parking.close()
        worker.method_queue.close()
        worker.tmp.close()
        client.close()


def test_closing_a_connection_whose_socket_is_closed_already_does_not_raise() -> None:
    """gunicorn closes the socket itself when a client goes away mid-handshake (a TCP health check); the
    worker's close then runs in its main loop, where an exception ends the worker (it did, under plain
    gunicorn TLS sockets, before this was caught)."""
    worker = _worker()
    server_side, client = socket.socketpair()
    conn = TConn(worker.cfg, server_side, ("127.0.0.1", 40000), ("127.0.0.1", 8443))
    server_side.close()
    worker.nr_conns = 1
    try:
        worker._close(conn)
        assert worker.nr_conns == 0
    finally:
        worker.tmp.close()
        client.close()
