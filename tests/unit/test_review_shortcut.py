"""The worker serves review requests straight from gunicorn's parsed request (`review_shortcut`): the same
answers, the same keep-alive decisions as gunicorn's own path, and gunicorn's path for everything else.

A real `PlacerThreadWorker` with Placer's Flask app, fed by gunicorn's parser over a socket pair (the
over-TLS tests run the same through a real server)."""

import email.utils
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger
from gunicorn.http.parser import RequestParser

from tests.conftest import fixture_request
from tests.helpers import node_selector_policy, snapshot_of
from webhook.config import Settings
from webhook.metrics import Metrics
from webhook.policy.snapshot import SnapshotHolder
from webhook.server.app import create_app
from webhook.server.parking import ParkingLot
from webhook.server.read_deadline import ReadDeadlines
from webhook.server.worker import PlacerThreadWorker

POLICY = node_selector_policy("p", "pool", "x")
REVIEW = json.dumps(fixture_request("pod-bare-create-dryrun")).encode()


@dataclass
class Connection:
    """What gunicorn's handle_request reads of a connection."""

    sock: socket.socket
    client: tuple[str, int] = ("127.0.0.1", 40000)
    server: tuple[str, int] = ("127.0.0.1", 8443)
    parser: Any = None


@dataclass
class Served:
    worker: PlacerThreadWorker
    connection: Connection
    client: socket.socket

    def send(self, raw: bytes) -> tuple[bool, bytes]:
        """Send one request; whether the worker keeps the connection, and the bytes it answered."""
        self.client.sendall(raw)
        request = next(self.connection.parser)
        keep = self.worker.handle_request(request, self.connection)
        return keep, _read_response(self.client)


def _read_response(sock: socket.socket) -> bytes:
    """One response, after any interim (1xx) ones, which are kept in front of it."""
    data = b""
    interim = b""
    while True:
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 1"):
            break
        interim, data = interim + head + b"\r\n\r\n", body
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return interim + head + b"\r\n\r\n" + body


def _worker(**config: Any) -> PlacerThreadWorker:
    cfg = Config()
    cfg.set("keepalive", 90)
    for key, value in config.items():
        cfg.set(key, value)
    app = create_app(holder=SnapshotHolder(snapshot_of(POLICY)), settings=Settings(), metrics=Metrics())

    class Application:
        def wsgi(self) -> Any:
            return app

    worker = PlacerThreadWorker(0, os.getppid(), [], Application(), 30, cfg, Logger(cfg))
    worker.read_deadlines = ReadDeadlines(10)
    worker.parking = ParkingLot()  # what init_process makes in a worker process
    worker.load_wsgi()
    return worker


@pytest.fixture
def serve() -> Iterator[Any]:
    opened: list[socket.socket] = []
    workers: list[PlacerThreadWorker] = []

    def make(**config: Any) -> Served:
        worker = _worker(**config)
        workers.append(worker)
        server_side, client_side = socket.socketpair()
        opened.extend([server_side, client_side])
        connection = Connection(server_side)
        connection.parser = RequestParser(worker.cfg, server_side, connection.client)
        return Served(worker, connection, client_side)

    yield make
    for sock in opened:
        sock.close()
    for worker in workers:
        worker.tmp.close()  # the heartbeat file gunicorn's Worker opens


def post(path: str = "/mutate?timeout=10s", *, headers: str = "", body: bytes = REVIEW, version: str = "1.1",
         content_type: str = "application/json") -> bytes:
    return (f"POST {path} HTTP/{version}\r\nHost: placer\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n").encode() + body


def _parts(raw: bytes) -> tuple[str, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return lines[0], headers, json.loads(body)


def test_a_review_is_answered_on_the_shortcut_and_the_connection_stays_open(serve: Any) -> None:
    served = serve()
    for _ in range(3):
        keep, raw = served.send(post())
        status, headers, answer = _parts(raw)
        assert keep is True and status == "HTTP/1.1 200 OK"
        assert headers["Connection"] == "keep-alive" and headers["Content-Type"] == "application/json"
        assert "Server" not in headers  # gunicorn's path says "Server: gunicorn"
        sent = email.utils.parsedate_to_datetime(headers["Date"])  # RFC 9110 IMF-fixdate, GMT
        assert headers["Date"].endswith(" GMT") and abs(sent.timestamp() - time.time()) < 5
        assert answer["response"]["allowed"] is True and answer["response"]["patchType"] == "JSONPatch"
    assert served.worker.nr == 3


def test_refusals_are_the_review_endpoints_own(serve: Any) -> None:
    served = serve()
    keep, raw = served.send(post(content_type="text/plain"))
    status, headers, answer = _parts(raw)
    assert status == "HTTP/1.1 415 Unsupported Media Type" and keep is True and "Server" not in headers
    assert "application/json" in answer["error"]
    _, raw = served.send(post(body=b"{not json"))
    assert _parts(raw)[0] == "HTTP/1.1 400 Bad Request"


def test_a_client_asking_to_close_gets_its_answer_and_the_connection_closes(serve: Any) -> None:
    keep, raw = serve().send(post(headers="Connection: close\r\n"))
    status, headers, _ = _parts(raw)
    assert status == "HTTP/1.1 200 OK" and headers["Connection"] == "close" and keep is False


def test_the_last_request_before_max_requests_closes_and_retires_the_worker(serve: Any) -> None:
    served = serve(max_requests=2)  # no jitter configured: gunicorn's Worker takes exactly 2
    assert served.send(post())[0] is True
    keep, raw = served.send(post())
    assert keep is False and _parts(raw)[1]["Connection"] == "close" and served.worker.alive is False


def test_a_stopping_worker_answers_and_closes(serve: Any) -> None:
    served = serve()
    served.worker.alive = False
    keep, raw = served.send(post())
    assert keep is False and _parts(raw)[1]["Connection"] == "close"


def test_the_body_read_ends_the_read_deadline(serve: Any) -> None:
    served = serve()
    served.worker.read_deadlines.arm(served.connection)
    served.send(post())
    assert served.worker.read_deadlines.expire() == 0 and not served.worker.read_deadlines._reading


@pytest.mark.parametrize("raw", [
    post(version="1.0"),  # HTTP/1.0 keep-alive rules are gunicorn's
    post(headers="Expect: 100-continue\r\n"),  # the interim 100 is gunicorn's
    b"GET /healthz HTTP/1.1\r\nHost: placer\r\n\r\n",
])
def test_other_requests_go_through_gunicorn(serve: Any, raw: bytes) -> None:
    served = serve()
    _, answer = served.send(raw)
    interim, continued, final = answer.rpartition(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert (interim == b"" and continued != b"") == (b"Expect" in raw)
    assert b"Server: gunicorn" in final.partition(b"\r\n\r\n")[0]
    assert final.startswith((b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK"))


@pytest.mark.parametrize("config", [{"accesslog": "-"}, {"post_request": lambda worker, req, environ, resp: None}])
def test_an_access_log_or_a_post_request_hook_keeps_every_request_on_gunicorns_path(
    serve: Any, config: dict[str, Any]
) -> None:
    served = serve(**config)
    _, raw = served.send(post())
    assert served.worker.review_shortcut is None and b"Server: gunicorn" in raw
