"""A thread keeps serving its kept-alive connection only while no other connection waits for it.

The worker serves a connection's next request in the same thread when it is already there (saving the
round trip through gunicorn's poller). Here each client pipelines all its requests at once, so the next one
is always there: with more connections than threads, every connection must still be served in turn, not
after the first one has had all its answers.
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
