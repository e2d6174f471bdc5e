"""A worker told to drain closes each connection after its response; told to resume, it keeps them alive.

The main process sends these signals to the worker granian is about to stop (webhook/server/respawn_drain.py):
the API server's client then reads `Connection: close` and sends its next admission on a new connection, instead
of sending it on one the stopping worker closes as idle (the keep-alive race, which fails that admission).
"""

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import fixture_request
from tests.e2e.server import running_server

pytestmark = pytest.mark.e2e


def _connection_headers(url: str, ca: Path, count: int) -> list[str]:
    """The Connection header of `count` admissions, each on a new session (so both workers answer some)."""
    headers = []
    for _ in range(count):
        with requests.Session() as session:
            reply = session.post(url + "/mutate?timeout=10s", json=fixture_request("pod-bare-create-dryrun"),
                                 verify=str(ca), timeout=10)
            assert reply.status_code == 200
            headers.append(reply.headers.get("connection", "").lower())
    return headers


def test_draining_workers_close_connections_after_each_response_until_they_resume(tmp_path: Path,
                                                                                  certificates: Any) -> None:
    with running_server(tmp_path, certificates) as server:
        workers = server.worker_pids()
        assert len(workers) == 2
        assert "close" not in _connection_headers(server.url, server.ca, 6)
        for pid in workers:
            os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while set(_connection_headers(server.url, server.ca, 6)) != {"close"}:
            assert time.monotonic() < deadline, "draining workers kept connections alive"
        for pid in workers:
            os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while "close" in _connection_headers(server.url, server.ca, 6):
            assert time.monotonic() < deadline, "resumed workers still close their connections"
        assert server.worker_pids() == workers, "the signals replaced or stopped no worker"
        log = server.log_text()
        assert "drains: it is being replaced" in log and "keeps connections alive again" in log
