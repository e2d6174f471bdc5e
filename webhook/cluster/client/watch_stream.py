"""The lines of a watch stream, read from the socket in blocks instead of one HTTP chunk at a time.

The API server sends each watch event as its own HTTP chunk. urllib3 and http.client decode a chunked body
chunk by chunk, with several Python calls and a buffered read per chunk: for a busy watch (5,000 Nodes
reporting status) that machinery costs more than the event. Here the body is read one TLS record at a time
straight from the socket (a busy watch in bursts, `PacedBody`), and the chunk framing is cut with
`bytes.find`; complete lines (events) come out in order.
"""

import http.client
import select
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from urllib3.connection import HTTPSConnection
from urllib3.connectionpool import HTTPSConnectionPool

BLOCK = 256 * 1024


class ChunkedStreamError(Exception):
    """The stream broke the chunked encoding, ended mid-event, or carried an event over the size limit."""


Skip = Callable[[bytes, int, int], bool]
"""`skip(buffer, start, end)`: True when the event `buffer[start:end]` can be dropped without decoding."""


class _Readable(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


class RawBodyConnection(HTTPSConnection):
    """urllib3's HTTPS connection, keeping the http.client response it reads each head with (`last_response`):
    its `fp` is the buffered socket file holding the start of the body, `sock` the socket under it.

    http.client builds a response with `self.response_class(sock, method=...)`; this method stands in for the
    class so that the connection sees the response it made."""

    last_response: http.client.HTTPResponse | None = None

    def response_class(self, sock: Any, *args: Any, **kwargs: Any) -> http.client.HTTPResponse:  # type: ignore[override]
        response = http.client.HTTPResponse(sock, *args, **kwargs)
        self.last_response = response
        return response


class RawBodyPool(HTTPSConnectionPool):
    """An HTTPS pool of `RawBodyConnection`s (urllib3's `ConnectionCls`)."""

    ConnectionCls = RawBodyConnection


def raw_body(response: Any) -> tuple[_Readable, Any] | None:
    """The socket file (and its socket) under a urllib3 response whose body is chunked and not yet read, or
    None (then the caller reads through urllib3): only on a `RawBodyConnection`."""
    if not getattr(response, "chunked", False) or response.headers.get("Content-Encoding"):
        return None  # not chunked, or compressed: urllib3 decodes it
    connection = response.connection
    inner = connection.last_response if isinstance(connection, RawBodyConnection) else None
    socket_file = inner.fp if inner is not None else None  # buffered socket file (headers already consumed)
    if socket_file is None or not hasattr(socket_file, "read1") or inner is None or inner.chunk_left is not None:
        return None
    return socket_file, connection.sock


class PacedBody:
    """The body of a busy watch read in bursts: everything that has arrived is read without waiting, then,
    when nothing more is there, the reader sleeps `pace` so that events gather before the next burst.

    The socket is switched to non-blocking (the connection is never reused, see `raw_body`): a read either
    returns what has arrived (one TLS record) or says at once that nothing has, so a burst costs one
    system call per record and one sleep, not a readiness check per record. Waiting for the next event
    after a quiet spell is a `select` bounded by the socket's own timeout (the watch's idle limit), as the
    blocking read was."""

    def __init__(self, socket_file: _Readable, sock: Any, pace: float) -> None:
        self._socket_file: _Readable | None = socket_file
        self._sock = sock
        self._pace = pace
        self._idle_limit = sock.gettimeout()

    def read1(self, size: int = BLOCK, /) -> bytes:
        if self._socket_file is not None:
            # The first read goes through the buffered file, blocking as before: it holds what arrived with
            # the headers, and hands all of it over (or reads past its buffer), so it is empty afterwards.
            socket_file, self._socket_file = self._socket_file, None
            first = socket_file.read1(size)
            self._sock.setblocking(False)
            return first
        data = _read_now(self._sock, size)
        if data is not None:
            return data
        time.sleep(self._pace)  # the burst is over: let the next one gather
        data = _read_now(self._sock, size)
        while data is None:
            readable, writable, _ = select.select([self._sock], [], [], self._idle_limit)
            if not readable and not writable:
                raise TimeoutError(f"no watch event for {self._idle_limit} s")
            data = _read_now(self._sock, size)
        return data


def _read_now(source: Any, size: int) -> bytes | None:
    """What the non-blocking socket `source` has now (b"" at the end of the stream); None when nothing has."""
    try:
        data: bytes = source.recv(size)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return None
    return data


def chunked_lines(body: _Readable, line_limit: int, skip: Skip | None = None) -> Iterator[bytes]:
    """Non-empty lines of a chunked body, until its last chunk; raises ChunkedStreamError when it breaks.

    The API server writes each event as one chunk ending in its newline: such a chunk is looked at where it
    lies in the buffer, by `skip(buffer, start, end)` first (an event it drops is never copied), then handed
    out with one copy; anything else (an event split over chunks, several in one) is reassembled, then
    given to `skip`. After a read in which events were skipped, an empty line is handed out: the reader's
    chance to stop while a stream brings nothing but skipped events."""
    pending = b""  # raw bytes not yet cut into chunks
    payload = bytearray()  # de-chunked bytes not yet cut into lines
    while True:
        data = body.read1(BLOCK)
        if not data:
            raise ChunkedStreamError("watch stream ended in the middle of an event")
        pending = pending + data if pending else data
        position = 0
        finished = False
        skipped = False
        while True:
            line_end = pending.find(b"\r\n", position)
            if line_end < 0:
                break
            try:
                size = int(pending[position:line_end].split(b";", 1)[0], 16)
            except ValueError:
                raise ChunkedStreamError("malformed chunk size in the watch stream") from None
            if size == 0:
                finished = True
                break
            start = line_end + 2
            end = start + size
            if len(pending) < end + 2:
                break
            position = end + 2
            if not payload and pending[end - 1] == _NEWLINE and pending.find(b"\n", start, end - 1) < 0:
                if skip is not None and skip(pending, start, end - 1):
                    skipped = True
                    continue
                line = pending[start : end - 1]
                if line and not line.isspace():
                    yield line
                continue
            payload += pending[start:end]
            if b"\n" in payload:
                *lines, rest = bytes(payload).split(b"\n")
                payload = bytearray(rest)
                for line in lines:
                    if not line.strip():
                        continue
                    if skip is not None and skip(line, 0, len(line)):
                        skipped = True
                        continue
                    yield line
        if skipped:
            yield b""
        pending = pending[position:] if position else pending
        if len(pending) > line_limit + 64:
            raise ChunkedStreamError("watch event larger than the limit")
        if len(payload) > line_limit:
            raise ChunkedStreamError("watch event larger than the limit")
        if finished:
            if payload.strip():
                raise ChunkedStreamError("watch stream ended in the middle of an event")
            return


_NEWLINE = ord("\n")
