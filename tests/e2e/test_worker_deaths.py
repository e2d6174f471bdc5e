"""A worker that dies costs its own requests, whenever it dies; workers that keep dying stop the server.

A worker can die at any moment: an OOM kill, a native crash. One that dies while granian replaces the
workers (`SIGHUP`: a rotated certificate, a new Kubernetes minor) is a fresh one as often as not, and must
cost no more than one that dies at any other time: the requests it was answering, and the new connections
queued on its listening socket. Workers that die again each time they are started (a crash loop) stop
`placer serve`, saying so, and the kubelet restarts the container.
"""

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.e2e.closed_loop import ClosedLoopClient
from tests.e2e.server import RunningServer, running_server

pytestmark = pytest.mark.e2e

CONNECTIONS = 4
WORKERS = 2
"""`running_server` starts two workers: a SIGHUP replaces both."""
LOSS_WINDOW = 2.0
"""Seconds after a kill within which its failures come (in flight on the worker, or queued on its socket)."""


def _new_workers(server: RunningServer, before: set[int], count: int, timeout: float = 30.0) -> list[int]:
    """The first `count` workers started since `before` was taken, in the order they appeared."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while len(seen) < count:
        assert time.monotonic() < deadline, f"only {len(seen)} new workers within {timeout:.0f}s"
        assert server.process.poll() is None, server.log_text()[-3000:]
        seen += [pid for pid in sorted(set(server.worker_pids()) - before) if pid not in seen]
        time.sleep(0.02)
    return seen[:count]


@pytest.mark.parametrize("victim", [pytest.param(1, id="first-new-worker", marks=pytest.mark.slow),
                                    pytest.param(2, id="second-new-worker")])
def test_a_fresh_worker_killed_during_a_replacement_costs_only_its_own_requests(
        tmp_path: Path, certificates: Any, victim: int) -> None:
    """SIGHUP starts a new worker beside each old one, one after the other; one of the new ones is killed
    a moment after it started. granian 2.8 took that for a crash loop and stopped every worker, when
    `placer serve` waited 3.5 s between the steps of a replacement (`serve.RESPAWN_INTERVAL_SECONDS`). The
    default suite kills the second new worker, as the failure was first seen; `-m slow` the first too
    (tests/unit/test_respawn_drain.py covers the drain in both cases).

    The server keeps answering throughout, ends with two new workers, and is still up once granian's
    crash-loop window has passed. The kill costs the requests in flight on the killed worker (one per
    connection at most) and new connections queued on its socket; the old workers still drain before they
    are stopped, so no kept-alive connection fails elsewhere."""
    with running_server(tmp_path, certificates) as server, ClosedLoopClient(
            server.url, certificates.ca_cert, fixture_request("pod-bare-create-dryrun"),
            connections=CONNECTIONS, reconnect_every=20) as client:
        client.wait_for_answers(40)
        before = set(server.worker_pids())
        os.kill(server.process.pid, signal.SIGHUP)
        doomed = _new_workers(server, before, victim)[-1]
        time.sleep(0.3)  # it has started serving: a fresh worker, not one still loading
        killed_at = time.monotonic()
        os.kill(doomed, signal.SIGKILL)
        client.wait_for_answers(40)
        deadline = time.monotonic() + 60
        while len(workers := set(server.worker_pids())) != 2 or workers & before or doomed in workers:
            assert server.process.poll() is None, f"placer serve exited: {server.log_text()[-3000:]}"
            assert time.monotonic() < deadline, f"workers {workers}, before {before}, killed {doomed}"
            time.sleep(0.1)
        time.sleep(6.0)  # past granian's crash-loop window (5.5 s after a worker was started)
        client.wait_for_answers(40)
        assert server.process.poll() is None, f"placer serve exited: {server.log_text()[-3000:]}"
        assert len(server.worker_pids()) == 2
    log = server.log_text()
    print(f"\nfresh worker {victim} killed during a replacement: {client.answered()} answered, "
          f"{len(client.failures)} failed")
    assert "crash loop" not in log
    # Outside the kill, the replacement costs what one without a kill does: at most two connections per worker
    # stopped. Which of them were kept alive, and whether a reset on the killed worker is seen within the
    # window, depends on when the OS schedules the client on a loaded machine, so only the bound is asserted
    # (on a quiet machine none was kept alive: docs/serving.md).
    elsewhere = [failure for failure in client.failures if not 0 <= failure.at - killed_at < LOSS_WINDOW]
    assert len(elsewhere) <= 2 * WORKERS, elsewhere
    assert len(client.failures) - len(elsewhere) <= 2 * CONNECTIONS, client.failures  # in flight, then queued


def test_workers_that_die_each_time_they_start_stop_the_server_saying_so(tmp_path: Path, certificates: Any) -> None:
    """A worker is killed, and so is each worker started after it, as soon as it appears: a crash loop.
    `placer serve` exits with an error and a log line that says why, rather than restarting them forever."""
    with running_server(tmp_path, certificates) as server:
        before = set(server.worker_pids())
        os.kill(min(before), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while server.process.poll() is None:
            assert time.monotonic() < deadline, "placer serve kept starting workers that die"
            for pid in set(server.worker_pids()) - before:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        assert server.process.returncode != 0
    log = server.log_text()
    assert "Worker crash loop detected" in log  # granian's own line
    assert "placer serve stops: workers die as soon as they start (a crash loop)" in log
