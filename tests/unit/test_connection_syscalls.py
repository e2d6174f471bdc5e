"""What the worker saves per request on a kept-alive connection: timeout changes that change nothing make no
system call (`tls.SteadyTimeoutSocket`), and a body read in full is not drained again
(`worker._body_read_in_full`). Both must leave the socket in the mode gunicorn asked for."""

import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser

from webhook.server.tls import SteadyTimeoutSocket, server_context
from webhook.server.worker import _body_read_in_full


@pytest.fixture
def tls_pair(certificates: Any) -> Iterator[tuple[ssl.SSLSocket, ssl.SSLSocket]]:
    """A connected (server, client) pair over real TLS, the server side made by Placer's context."""
    context = server_context(certificates.cert, certificates.key, None)
    client_context = ssl.create_default_context(cafile=str(certificates.ca_cert))
    raw_server, raw_client = socket.socketpair()
    client_side: list[ssl.SSLSocket] = []
    handshake = threading.Thread(target=lambda: client_side.append(
        client_context.wrap_socket(raw_client, server_hostname="localhost")))
    handshake.start()
    server = context.wrap_socket(raw_server, server_side=True)
    handshake.join(10)
    yield server, client_side[0]
    server.close()
    client_side[0].close()


@pytest.fixture
def timeout_calls(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """Every timeout change that reaches the socket (and so the `ioctl` that sets the descriptor's mode)."""
    calls: list[float | None] = []
    reach_socket = socket.socket.settimeout

    def counted(self: socket.socket, value: float | None) -> None:
        calls.append(value)
        reach_socket(self, value)

    monkeypatch.setattr(socket.socket, "settimeout", counted, raising=False)
    return calls


def test_the_server_context_makes_steady_sockets(tls_pair: tuple[ssl.SSLSocket, ssl.SSLSocket]) -> None:
    server, _ = tls_pair
    assert isinstance(server, SteadyTimeoutSocket)


def test_a_timeout_set_to_the_value_it_has_makes_no_system_call(
    tls_pair: tuple[ssl.SSLSocket, ssl.SSLSocket], timeout_calls: list[float | None]
) -> None:
    server, _ = tls_pair
    server.setblocking(True)  # what gunicorn does before every request
    server.settimeout(None)  # what its body check does after every request
    assert timeout_calls == []
    assert os.get_blocking(server.fileno()) and server.gettimeout() is None


def test_a_timeout_that_changes_reaches_the_descriptor(
    tls_pair: tuple[ssl.SSLSocket, ssl.SSLSocket], timeout_calls: list[float | None]
) -> None:
    server, _ = tls_pair
    server.setblocking(False)  # a connection going back to the poller
    assert not os.get_blocking(server.fileno()) and server.gettimeout() == 0.0
    server.settimeout(2.5)
    assert not os.get_blocking(server.fileno()) and server.gettimeout() == 2.5
    server.setblocking(True)  # taken by a thread again
    assert os.get_blocking(server.fileno()) and server.gettimeout() is None
    assert timeout_calls == [0.0, 2.5, None]
    with pytest.raises(ValueError):
        server.settimeout(-1)


@pytest.fixture
def parsed() -> Iterator[Callable[[bytes], Any]]:
    """gunicorn's parser after reading one request's head from the given bytes."""
    opened: list[socket.socket] = []

    def parse(raw: bytes) -> Any:
        left, right = socket.socketpair()
        opened.append(left)
        right.sendall(raw)
        right.close()
        parser = RequestParser(Config(), left, ("127.0.0.1", 1))
        next(parser)
        return parser

    yield parse
    for sock in opened:
        sock.close()


def test_only_a_body_read_to_its_declared_end_counts_as_read_in_full(parsed: Callable[[bytes], Any]) -> None:
    body = b'{"kind":"AdmissionReview"}'
    request = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    unread = parsed(request)
    assert not _body_read_in_full(unread)

    partly = parsed(request)
    partly.mesg.body.read(5)
    assert not _body_read_in_full(partly)

    whole = parsed(request)
    assert whole.mesg.body.read() == body
    assert _body_read_in_full(whole)

    empty = parsed(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _body_read_in_full(empty)

    chunked = parsed(b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"5\r\nhello\r\n0\r\n\r\n")
    assert chunked.mesg.body.read() == b"hello"
    assert not _body_read_in_full(chunked)  # gunicorn's own check decides: the trailer may still be unread
