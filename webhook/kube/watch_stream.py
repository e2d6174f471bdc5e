"""The lines of a watch stream, read from the socket in blocks instead of one HTTP chunk at a time.

The API server sends each watch event as its own HTTP chunk. urllib3 and http.client decode a chunked body
chunk by chunk, with several Python calls and a buffered read per chunk: for a busy watch (5,000 Nodes
reporting status) that machinery costs more than the event. Here the body is read with one `read1` per
TLS record that has arrived (everything already in the socket's buffer, up to 256 KiB per call) and the
chunk framing is cut with `bytes.find`; complete lines (events) come out in order.
"""

import select
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

BLOCK = 256 * 1024


class ChunkedStreamError(Exception):
    """The stream broke the chunked encoding, ended mid-event, or carried an event over the size limit."""


class _Readable(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


def raw_body(response: Any) -> tuple[_Readable, Any] | None:
    """The socket file (and its socket) under a urllib3 response whose body is chunked and not yet read, or
    None (then the caller reads through urllib3)."""
    if not getattr(response, "chunked", False) or response.headers.get("Content-Encoding"):
        return None  # not chunked, or compressed: urllib3 decodes it
    inner = getattr(response, "_fp", None)  # http.client.HTTPResponse
    socket_file = getattr(inner, "fp", None)  # its buffered socket file (headers already consumed)
    sock = getattr(getattr(socket_file, "raw", None), "_sock", None)
    if socket_file is None or not hasattr(socket_file, "read1") or getattr(inner, "chunk_left", None) is not None:
        return None
    return socket_file, sock


def gather_when_idle(sock: Any, pace: float) -> Callable[[], None]:
    """Before a read: when nothing has arrived yet, sleep `pace` so that events gather in the socket's
    buffer and are read in one burst (one wake-up for many events instead of one each)."""

    def before_read() -> None:
        pending = getattr(sock, "pending", None)
        if pending is not None and pending():
            return  # decrypted bytes wait in the TLS layer
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return
        if not readable:
            time.sleep(pace)

    return before_read


def chunked_lines(
    body: _Readable, line_limit: int, before_read: Callable[[], None] | None = None
) -> Iterator[bytes]:
    """Non-empty lines of a chunked body, until its last chunk; raises ChunkedStreamError when it breaks.

    `before_read` runs before every read but the first (which returns what came with the headers)."""
    pending = b""  # raw bytes not yet cut into chunks
    payload = bytearray()  # de-chunked bytes not yet cut into lines
    first = True
    while True:
        if before_read is not None and not first:
            before_read()
        first = False
        data = body.read1(BLOCK)
        if not data:
            raise ChunkedStreamError("watch stream ended in the middle of an event")
        pending = pending + data if pending else data
        position = 0
        finished = False
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
            end = line_end + 2 + size
            if len(pending) < end + 2:
                break
            payload += pending[line_end + 2 : end]
            position = end + 2
        pending = pending[position:]
        if len(pending) > line_limit + 64:
            raise ChunkedStreamError("watch event larger than the limit")
        if b"\n" in payload:
            *lines, rest = bytes(payload).split(b"\n")
            payload = bytearray(rest)
            for line in lines:
                if line.strip():
                    yield line
        if len(payload) > line_limit:
            raise ChunkedStreamError("watch event larger than the limit")
        if finished:
            if payload.strip():
                raise ChunkedStreamError("watch stream ended in the middle of an event")
            return
