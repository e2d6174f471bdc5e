"""Idle connections waited on by the serving threads themselves, not by gunicorn's main thread.

gunicorn's threaded worker keeps an idle kept-alive connection in its main thread's poller. Each request
then makes a round trip through that thread: the poller wakes it, it takes the connection out of the
poller and hands it to a pool thread (a future, a queue, a thread wake-up); when the request is answered
the pool thread writes to a pipe to wake the main thread again, which puts the connection back into the
poller — two more wake-ups and two GIL hand-offs per request, 9-16 % of a request's CPU at more
connections than threads, on a minimal app as on Placer.

Here the serving threads wait on the idle connections themselves (leader/follower): one `epoll` set holds
every connection between requests, each registered `EPOLLONESHOT`, so the kernel gives a connection's
readiness to exactly one waiting thread and reports it again only once that thread puts the connection
back. A request then costs its thread one `epoll_ctl` and one `epoll_wait`, and nothing of any other
thread. The worker's main thread still accepts connections (and parks them here), closes those idle past
the keep-alive timeout and runs gunicorn's shutdown.
"""

import contextlib
import math
import select
import threading
from collections import deque
from typing import Any

_WAIT_FOR_A_REQUEST = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT
"""A request's bytes, or the client's end of the connection (which the thread then reads as closed)."""


class ParkingLot:
    """The connections of one worker that wait for their next request (each with a `timeout`: when to close
    it if nothing comes), keyed by file descriptor."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._parked: dict[int, Any] = {}
        self._buffered: deque[Any] = deque()
        """Connections whose next request was read with the last one (or is decrypted and waiting in TLS):
        the socket would not report it."""
        self._lock = threading.Lock()

    def park(self, conn: Any, timeout: float) -> None:
        """Wait for the connection's next request, or close it at `timeout` (monotonic) if none comes."""
        conn.timeout = timeout
        fd = conn.sock.fileno()
        with self._lock:
            self._parked[fd] = conn  # before arming: a thread may take the connection as soon as it is armed
            try:
                self._epoll.modify(fd, _WAIT_FOR_A_REQUEST)  # parked before: re-armed
            except FileNotFoundError:  # a new connection (or a descriptor number reused)
                self._epoll.register(fd, _WAIT_FOR_A_REQUEST)

    def park_buffered(self, conn: Any) -> None:
        """A connection whose next request is already read: served in turn with the others."""
        with self._lock:
            self._buffered.append(conn)

    def next_ready(self, timeout: float) -> Any | None:
        """A connection whose request (or end) has come, taken out of the lot; None after `timeout` seconds.

        A connection the socket reports comes before one with a buffered request, so that a client
        pipelining its requests takes its turn with the others instead of keeping a thread to itself."""
        try:
            events = self._epoll.poll(0.0 if self._buffered else timeout, 1)
        except InterruptedError:
            events = []
        except (OSError, ValueError):  # the lot was closed under a waiting thread
            return None
        with self._lock:
            for fd, _ in events:
                return self._parked.pop(fd, None)  # None: it expired meanwhile (the main thread closed it)
            return self._buffered.popleft() if self._buffered else None

    def forget(self, conn: Any) -> None:
        """The connection is about to be closed: it must not stay registered under its descriptor (a new
        connection may be given the same number)."""
        try:
            fd = conn.sock.fileno()
        except (OSError, ValueError):
            return
        with self._lock:
            self._parked.pop(fd, None)
            self._unregister(fd)

    def expired(self, now: float = math.inf) -> list[Any]:
        """Take out the connections whose timeout has passed (every one, by default)."""
        with self._lock:
            gone = [fd for fd, conn in self._parked.items() if conn.timeout <= now]
            taken = [self._parked.pop(fd) for fd in gone]
            for fd in gone:
                self._unregister(fd)
            if now == math.inf:
                taken.extend(self._buffered)
                self._buffered.clear()
        return taken

    def cap_timeouts(self, deadline: float) -> None:
        """Close every parked connection by `deadline` at the latest (a stopping worker)."""
        with self._lock:
            for conn in self._parked.values():
                conn.timeout = min(conn.timeout, deadline)

    def close(self) -> None:
        self._epoll.close()

    def __len__(self) -> int:
        return len(self._parked) + len(self._buffered)

    def _unregister(self, fd: int) -> None:
        with contextlib.suppress(OSError, ValueError):  # never parked, or closed (the kernel dropped it)
            self._epoll.unregister(fd)
