"""SIGTERM (the kubelet stopping the pod) drains: a review in flight is answered, then the server exits.

The review's body is still arriving when the signal comes; granian's workers stop accepting connections,
answer the requests they hold, and exit; the main process stops the controller and exits 0.
"""

import json
import os
import signal
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.e2e.server import copy_policies, running_server

pytestmark = pytest.mark.e2e


def test_a_review_in_flight_at_sigterm_is_answered_and_the_server_exits(tmp_path: Path, certificates: Any) -> None:
    body = json.dumps(fixture_request("pod-bare-create-dryrun")).encode()
    head = (b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: placer\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    with running_server(tmp_path, certificates, policies=copy_policies(tmp_path)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(server.ca))
        connection = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=15),
                                         server_hostname="localhost")
        connection.sendall(head + body[: len(body) // 2])
        time.sleep(0.3)  # the worker has the request and waits for the rest of its body
        os.kill(server.process.pid, signal.SIGTERM)
        time.sleep(0.5)
        connection.sendall(body[len(body) // 2:])
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < 100:
            chunk = connection.recv(65536)
            if not chunk:
                break
            answer += chunk
        connection.close()
        code = server.process.wait(timeout=20)
        log = server.log_text()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b'"patch"' in answer or b'"allowed":true' in answer
    assert code == 0, log[-2000:]
    assert "Traceback" not in log
