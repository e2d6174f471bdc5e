"""Connections share a worker in turn, and the workers share the connections.

A worker's one Python thread answers the requests of all its connections (granian holds them, as tasks of
its runtime). Clients pipelining all their requests at once are answered in turn, not the first one's all
before the others'; a new connection is answered at once while another sits idle; connections opened
together land on every worker (each worker listens on the port itself: the kernel spreads them); and
clients that drop their connections rudely never take a worker down.
"""

import json
import os
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, copy_policies, running_server

CLIENTS, REQUESTS = 3, 150


def _read_response(stream: Any) -> int:
    status = int(stream.readline().split()[1])
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    stream.read(length)
    return status


def _pod_review_request(uid: str | None = None) -> bytes:
    """The captured Pod review as one raw HTTP/1.1 request (with request.uid `uid`, if given)."""
    review = fixture_request("pod-bare-create-dryrun")
    if uid is not None:
        review["request"]["uid"] = uid
    body = json.dumps(review).encode()
    return (b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _connector(server: RunningServer) -> Callable[[], ssl.SSLSocket]:
    """Opens a TLS connection to the server (one per call)."""
    port = int(server.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(server.ca))

    def connect() -> ssl.SSLSocket:
        return context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                                   server_hostname="localhost")

    return connect


def test_busy_connections_share_one_worker_in_turn(tmp_path: Path, certificates: Any) -> None:
    """What the worker guarantees: connections whose requests are waiting are answered in turn, one request
    of each at a time, not one connection's pipeline before the next. So the test makes sure every client's
    requests are waiting before the worker answers any: the worker is stopped (SIGSTOP) once the clients
    have connected, each client writes its first request (into the worker's socket buffer) and then the rest,
    and the worker is let go (SIGCONT) once every first request is written. (Without that, a client thread
    the machine runs late can send its pipeline after another's was answered whole: no unfairness of the
    worker, a test timing out on a loaded machine.)

    The order is the worker's own: its admission log lines, one per review answered, in the order it
    answered them (each client's reviews carry its number in their uid). The clients' threads read answers
    already buffered on their sockets whenever the GIL lets them, so the time each read one says little."""
    answered: list[tuple[int, int]] = []
    lock = threading.Lock()
    with running_server(tmp_path, certificates, policies=copy_policies(tmp_path),
                        extra=["--workers", "1"]) as server:
        (worker,) = server.worker_pids()
        connect = _connector(server)
        connections = [connect() for _ in range(CLIENTS)]
        first_written = threading.Barrier(CLIENTS + 1)

        def client(number: int) -> None:
            requests = [_pod_review_request(f"client-{number}-{index}") for index in range(REQUESTS)]
            connection = connections[number]
            connection.sendall(requests[0])
            first_written.wait(30)
            connection.sendall(b"".join(requests[1:]))
            stream = connection.makefile("rb")
            for _ in range(REQUESTS):
                status = _read_response(stream)
                with lock:
                    answered.append((number, status))
            connection.close()

        os.kill(worker, signal.SIGSTOP)
        try:
            threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
            for thread in threads:
                thread.start()
            first_written.wait(30)
        finally:
            os.kill(worker, signal.SIGCONT)
        for thread in threads:
            thread.join(60)
    assert len(answered) == CLIENTS * REQUESTS and {status for _, status in answered} == {200}
    uids = [json.loads(line)["uid"] for line in server.log_text().splitlines() if '"placer.admission"' in line]
    assert sorted(uids) == sorted(f"client-{n}-{i}" for n in range(CLIENTS) for i in range(REQUESTS))
    order = [int(uid.split("-")[1]) for uid in uids]
    first_done = min(max(i for i, n in enumerate(order) if n == client) for client in range(CLIENTS))
    assert all(client in order[:first_done] for client in range(CLIENTS)), order


def test_a_new_connection_is_answered_at_once_while_another_sits_idle(
        tmp_path: Path, certificates: Any) -> None:
    request = _pod_review_request()
    with running_server(tmp_path, certificates, policies=copy_policies(tmp_path),
                        extra=["--workers", "1"]) as server:
        connect = _connector(server)

        idle = connect()
        idle.sendall(request)
        assert _read_response(idle.makefile("rb")) == 200  # idle now, waiting for its next request
        latecomer = connect()
        started = time.monotonic()
        latecomer.sendall(request)
        assert _read_response(latecomer.makefile("rb")) == 200
        waited = time.monotonic() - started
        idle.sendall(request)  # the idle connection is still served afterwards
        assert _read_response(idle.makefile("rb")) == 200
        idle.close()
        latecomer.close()
    assert waited < 0.5, f"the new connection waited {waited:.3f} s while another sat idle"


def _sockets(pid: int) -> int:
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


def _wait_until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_connections_opened_together_are_shared_between_the_workers(tmp_path: Path, certificates: Any) -> None:
    """The API server (or a load test) opens its connections at once; each worker must get its share, not the
    first one awake most of them (one core working for two, for the connections' lifetime). The kernel hashes
    each connection to one of the workers' listening sockets: 64 connections land about evenly."""
    request = _pod_review_request()
    opened = 64
    with running_server(tmp_path, certificates, policies=copy_policies(tmp_path),
                        extra=["--workers", "2"]) as server:
        connect = _connector(server)
        _wait_until(lambda: len(server.worker_pids()) == 2, timeout=10)
        workers = server.worker_pids()
        time.sleep(0.5)  # the start-up probes' connections are closed
        idle = [_sockets(pid) for pid in workers]
        connections: list[ssl.SSLSocket] = []
        start = threading.Barrier(opened)

        def client() -> None:
            start.wait()
            connection = connect()
            connection.sendall(request)
            assert _read_response(connection.makefile("rb")) == 200
            connections.append(connection)

        threads = [threading.Thread(target=client) for _ in range(opened)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        _wait_until(lambda: sum(_sockets(pid) for pid in workers) == sum(idle) + opened)
        shares = [_sockets(pid) - count for pid, count in zip(workers, idle, strict=True)]
        for connection in connections:
            connection.close()
    # binomial(64, 1/2): below 16 once in ~30,000 runs
    assert len(connections) == opened and sum(shares) == opened and min(shares) >= 16, shares


def test_clients_dropping_their_connections_never_take_a_worker_down(tmp_path: Path, certificates: Any) -> None:
    """A client that closes its connection without a TLS close_notify (an API server restarting) or before
    the TLS handshake (a load balancer's TCP health check): the worker closes its side and goes on."""
    request = _pod_review_request()
    with running_server(tmp_path, certificates, policies=copy_policies(tmp_path),
                        extra=["--workers", "1"]) as server:
        connect = _connector(server)
        workers = server.worker_pids()
        time.sleep(0.5)
        listening = _sockets(workers[0])
        for _ in range(5):
            dropped = connect()
            dropped.sendall(request)
            assert _read_response(dropped.makefile("rb")) == 200
            dropped.close()  # no close_notify: the worker reads an unexpected EOF
            connect().close()  # a handshake, then nothing
            socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=5).close()
        time.sleep(0.5)
        survivor = connect()
        survivor.sendall(request)
        assert _read_response(survivor.makefile("rb")) == 200
        survivor.close()
        assert server.worker_pids() == workers
        _wait_until(lambda: _sockets(workers[0]) <= listening)
        assert _sockets(workers[0]) <= listening, "connections left open"
        assert "Traceback" not in server.log.read_text()
