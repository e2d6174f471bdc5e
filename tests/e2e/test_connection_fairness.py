"""A thread keeps serving its kept-alive connection only while no other connection waits for it.

The worker serves a connection's next request in the same thread when it is there within 2 ms (saving the
round trip through gunicorn's poller). With more connections than threads, every connection must still be
served in turn: clients pipelining all their requests at once are answered in turn, not the first one's
all before the others', and a connection arriving just after the only thread answered an idle one is
answered at once.
"""

import json
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import fixture_request
from tests.e2e.server import copy_policies, running_server

CLIENTS, REQUESTS = 3, 40


def _read_response(stream: Any) -> int:
    status = int(stream.readline().split()[1])
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    stream.read(length)
    return status


def test_busy_connections_share_one_thread_in_turn(tmp_path: Path, certificates: Any) -> None:
    body = json.dumps(fixture_request("pod-bare-create-dryrun")).encode()
    request = (b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    answered: list[tuple[float, int, int]] = []
    lock = threading.Lock()
    with running_server(tmp_path, certificates, policies=copy_policies(tmp_path),
                        extra=["--workers", "1", "--threads", "1"]) as server:
        port = int(server.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(server.ca))

        def client(number: int) -> None:
            connection = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                                             server_hostname="localhost")
            connection.sendall(request * REQUESTS)
            stream = connection.makefile("rb")
            for _ in range(REQUESTS):
                status = _read_response(stream)
                with lock:
                    answered.append((time.monotonic(), number, status))
            connection.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert len(answered) == CLIENTS * REQUESTS and {status for _, _, status in answered} == {200}
    order = [number for _, number, _ in sorted(answered)]
    first_done = min(max(i for i, n in enumerate(order) if n == client) for client in range(CLIENTS))
    assert all(client in order[:first_done] for client in range(CLIENTS)), order


def test_a_new_connection_is_answered_at_once_while_the_only_thread_holds_an_idle_one(
        tmp_path: Path, certificates: Any) -> None:
    body = json.dumps(fixture_request("pod-bare-create-dryrun")).encode()
    request = (b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    with running_server(tmp_path, certificates, policies=copy_policies(tmp_path),
                        extra=["--workers", "1", "--threads", "1"]) as server:
        port = int(server.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(server.ca))

        def connect() -> ssl.SSLSocket:
            return context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                       server_hostname="localhost")

        idle = connect()
        idle.sendall(request)
        assert _read_response(idle.makefile("rb")) == 200  # its thread may now wait for its next request
        latecomer = connect()
        started = time.monotonic()
        latecomer.sendall(request)
        assert _read_response(latecomer.makefile("rb")) == 200
        waited = time.monotonic() - started
        idle.sendall(request)  # the idle connection is still served afterwards
        assert _read_response(idle.makefile("rb")) == 200
        idle.close()
        latecomer.close()
    assert waited < 0.5, f"the new connection waited {waited:.3f} s for the thread holding an idle one"
