"""A deadline on how long a client may take to send its request: TLS handshake, head and body.

gunicorn's threaded worker reads a request with a blocking socket in one of its few threads, and once the
first byte has arrived it waits for the rest without limit. A client that trickles one byte a second (a
slowloris) holds that thread for as long as it likes, and `threads * workers` such clients stop every
admission in the cluster. The API server sends a whole review at once, so a request that is still
arriving after a few seconds is not worth a thread.

`ReadDeadlines` is armed when a worker thread takes a connection and disarmed once the request's body has
been read in full; one watchdog thread per worker shuts down the socket of any connection still reading
past its deadline. Shutting the socket down (rather than closing it) wakes the blocked read, which then
fails like a client disconnect: gunicorn closes the connection and the thread is free again. The time the
application then spends answering is not counted; the admission deadline bounds that.
"""

import errno
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Connection(Protocol):
    """What the watchdog needs of a gunicorn connection: its current socket (TLS replaces it) and peer."""

    sock: socket.socket
    client: Any


@dataclass
class _Reading:
    connection: Connection
    deadline: float


class ReadDeadlines:
    """Connections being read by worker threads, and the watchdog that cuts the ones past their deadline."""

    def __init__(self, timeout: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self._reading: dict[int, _Reading] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._armed = threading.Event()
        """Set while some connection may be reading: an idle worker's watchdog sleeps until then."""
        self.expired = 0
        """Connections closed for being too slow, since start."""

    def arm(self, connection: Connection) -> None:
        """The calling thread starts reading a request from `connection`."""
        with self._lock:
            self._reading[threading.get_ident()] = _Reading(connection, self._clock() + self.timeout)
            if not self._armed.is_set():
                self._armed.set()

    def disarm(self) -> None:
        """The calling thread has the whole request (or gives the connection back): no deadline any more."""
        with self._lock:
            self._reading.pop(threading.get_ident(), None)

    def start(self) -> None:
        threading.Thread(target=self._watch, name="placer-read-deadlines", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        self._armed.set()

    def expire(self) -> int:
        """Shut down every connection past its deadline; how many were. The watchdog calls this."""
        now = self._clock()
        count = 0
        with self._lock:
            for ident, reading in list(self._reading.items()):
                if reading.deadline > now:
                    continue
                if _shut_down(reading.connection.sock):
                    del self._reading[ident]
                    count += 1
                    log.warning("client %s did not send its request within %gs; connection closed",
                                _peer(reading.connection), self.timeout)
                # else the socket is being replaced by its TLS wrapper right now: the next round gets it.
            self.expired += count
        return count

    def _watch(self) -> None:
        """Look every quarter of the deadline while connections are being read; sleep while none is (an idle
        worker then costs no wake-ups)."""
        interval = min(0.25, self.timeout / 4)
        while self._armed.wait() and not self._stopped.wait(interval):
            self.expire()
            with self._lock:
                if not self._reading:
                    self._armed.clear()  # under the lock: an `arm` after this sets it again


def _shut_down(sock: socket.socket) -> bool:
    """Wake any read blocked on `sock`, by the plain socket call: SSLSocket.shutdown would drop its
    TLS state from under the thread using it. While a response is written the worker wraps the socket
    (`worker._HeadWithBody`); its `wrapped` is the socket."""
    sock = getattr(sock, "wrapped", sock)
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError as error:
        # Already closed by the client (ENOTCONN) counts as done; a detached socket (EBADF) does not.
        return error.errno != errno.EBADF
    return True


def _peer(connection: Connection) -> str:
    client = connection.client
    if isinstance(client, tuple) and len(client) >= 2:
        return f"{client[0]}:{client[1]}"
    return str(client)


class BodyReadSignal:
    """A WSGI input stream that calls `done` once the body has been read in full.

    With a Content-Length, that is when that many bytes have been read (readers such as Werkzeug's stop
    exactly there and never see the end of the stream); without one (chunked), when a read returns nothing.
    """

    def __init__(self, stream: Any, length: int | None, done: Callable[[], None]) -> None:
        self._stream = stream
        self._remaining = length
        self._done: Callable[[], None] | None = done
        if length == 0:
            self._finish()

    def read(self, size: int | None = None) -> bytes:
        return self._count(self._stream.read(size) if size is not None else self._stream.read(), size)

    def readline(self, size: int | None = None) -> bytes:
        return self._count(self._stream.readline(size) if size is not None else self._stream.readline(), size)

    def readlines(self, hint: int | None = None) -> list[bytes]:
        return list(self)

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line

    def _count(self, data: bytes, size: int | None) -> bytes:
        if self._remaining is not None:
            self._remaining -= len(data)
        if (self._remaining is not None and self._remaining <= 0) or (not data and size != 0):
            self._finish()
        return data

    def _finish(self) -> None:
        if self._done is not None:
            done, self._done = self._done, None
            done()
