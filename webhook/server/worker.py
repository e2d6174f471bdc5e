"""gunicorn's threaded worker, with a deadline on slow clients (see `read_deadline`), whose serving threads
wait on the idle connections themselves (`parking`: no round trip through the main thread per request),
that leaves a new connection to a less loaded worker (see `accept_pacing`), writes a response's head and
body in one write, and asks to be replaced once Kubernetes' CEL library calls have leaked their budget in
it (`cel_libraries.leaks`). The review endpoints' requests are answered from gunicorn's parsed request
without its WSGI environ and response objects (`review_shortcut`).

gunicorn's main loop stays in charge of everything but serving: it accepts connections (and parks them),
closes those idle past the keep-alive timeout, closes the ones a request ended with `Connection: close`,
beats the heart, and runs the graceful shutdown. The serving threads replace gunicorn's thread pool; after
each request a thread serves another connection's request that is already there, else this connection's
next one if it is already there, else parks the connection and waits for whichever comes first.

Per request it also leaves out system calls gunicorn makes that change nothing: the drain of a body the
application has read in full (two timeout changes, see also `tls.SteadyTimeoutSocket`), the switch to
non-blocking mode and back around each wait in the poller (a parked connection stays blocking: only its
readiness is waited on), and heartbeats to the arbiter more often than once a second. Each such call lets
another thread take the GIL.

The deadline is armed when a thread takes a connection (before the TLS handshake) and disarmed when the
application has read the request body in full; the WSGI callable is wrapped so the body stream reports
that moment. A parked connection (idle keep-alive) has no deadline: waiting there costs no thread, and the
keep-alive timeout closes it.

Replacement is gunicorn's own graceful restart (as for `max_requests`): the worker stops accepting, answers
the requests it holds, closes its connections (the API server reconnects to another worker) and exits; the
arbiter starts a fresh one.
"""

import logging
import select
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from gunicorn.config import PostRequest
from gunicorn.http.body import LengthReader
from gunicorn.workers.gthread import _DEFER, STOP_KEEPALIVE_LINGER, ThreadWorker

from webhook.config import READ_TIMEOUT_SECONDS
from webhook.server.accept_pacing import AcceptPacing
from webhook.server.c_heap import use_one_arena
from webhook.server.parking import ParkingLot
from webhook.server.read_deadline import BodyReadSignal, ReadDeadlines
from webhook.server.review_endpoint import REVIEW_ENDPOINTS_EXTENSION
from webhook.server.review_shortcut import ReviewShortcut

PARKED_WAIT = 1.0
"""Seconds a serving thread waits for a parked connection's request before it looks whether the worker is
stopping."""

HEARTBEAT_INTERVAL = 1.0
"""Seconds between the worker's heartbeats to the arbiter (it replaces a worker silent for `timeout`, 30 s).
gunicorn beats on every turn of the worker's event loop, which under load is every request or two: each
beat is a file-time update during which another thread takes the GIL."""

LEAKS_EXTENSION = "placer.cel_leaks"
"""Where the Flask app keeps its compiler's `LeakAccount`."""

log = logging.getLogger(__name__)


class PlacerThreadWorker(ThreadWorker):  # type: ignore[misc]
    """`gthread` whose threads cannot be held by a client that sends its request slowly."""

    def init_process(self) -> None:
        use_one_arena()  # before any thread starts (c_heap)
        settings = getattr(self.app, "settings", None)  # Placer's server has them; plain `gunicorn` does not
        self.read_deadlines = ReadDeadlines(getattr(settings, "read_timeout", READ_TIMEOUT_SECONDS))
        self.recycling = threading.Lock()
        self.heartbeat = Heartbeat(HEARTBEAT_INTERVAL)
        self.read_deadlines.start()
        self.accept_pacing = AcceptPacing(self.cfg.threads, enabled=self.cfg.workers > 1)
        self.connections: weakref.WeakSet[Any] = weakref.WeakSet()
        """The connections this worker holds: gunicorn's own count (`nr_conns`) goes below zero when
        clients close kept-alive connections, so the connections themselves are counted (a closed one is
        dropped by gunicorn, and so from here)."""
        self.parking = ParkingLot()
        self.serving = False
        super().init_process()

    def run(self) -> None:
        """gunicorn's event loop in the main thread (accepting, timeouts, shutdown), with the serving threads
        waiting on the parked connections themselves (`parking`) instead of on gunicorn's thread pool."""
        self.serving = True
        threads = [threading.Thread(target=self._serve_parked, name=f"placer-serving-{index}", daemon=True)
                   for index in range(self.cfg.threads)]
        for thread in threads:
            thread.start()
        try:
            super().run()
        finally:
            self.serving = False
            for thread in threads:
                thread.join(PARKED_WAIT + 1.0)
            self.parking.close()

    def _serve_parked(self) -> None:
        """One serving thread: take a connection whose request has come, serve it, park it again."""
        conn = None
        while self.serving:
            if conn is None:
                conn = self.parking.next_ready(PARKED_WAIT)
                if conn is None:
                    continue
            try:
                conn = self._after_request(conn, self.handle(conn))
            except Exception:  # handle() answers every failure itself; this thread must never end
                log.exception("serving a connection")
                self._close_later(conn)
                conn = None

    def _after_request(self, conn: Any, result: Any) -> Any | None:
        """What gunicorn's `finish_request` does in the main thread, here in the serving thread: park a
        kept-alive connection (or one whose first request did not come in time) or close it. Returns the
        connection this thread serves next, if one is ready now: another connection's request first (each
        in turn), else this connection's next request when it is already there (the API server sends its
        next admission at once under load: serving it here saves waking another thread)."""
        if result is True and _next_request_buffered(conn):
            self.parking.park_buffered(conn)
            return self.parking.next_ready(0.0)
        if result is True or (result is _DEFER and self.alive):
            ready = self.parking.next_ready(0.0)
            if ready is None and result is True and self.alive and _readable(conn.sock):
                return conn
            timeout = time.monotonic() + self.cfg.keepalive
            if not self.alive:  # a stopping worker answers a request that comes meanwhile, then closes
                timeout = min(timeout, time.monotonic() + STOP_KEEPALIVE_LINGER)
            self.parking.park(conn, timeout)
            return ready
        self._close_later(conn)
        return None

    def _close_later(self, conn: Any) -> None:
        """Take the connection out of the parking and close it in the main thread, as gunicorn closes."""
        self.parking.forget(conn)
        self.method_queue.defer(self._close, conn)

    def _close(self, conn: Any) -> None:
        """Close a connection in the main thread (a callback of its loop: it must not raise), as gunicorn's
        `finish_request` does: gracefully, or at once when that fails (a socket closed already)."""
        self.nr_conns -= 1
        try:
            conn.close(graceful=True)
        except Exception:
            conn.close()  # gunicorn's util.close: ignores a socket closed already

    def enqueue_req(self, conn: Any) -> None:
        """A new connection (gunicorn's `accept`): park it until its first request comes."""
        self.connections.add(conn)
        try:
            self.parking.park(conn, time.monotonic() + self.cfg.keepalive)
        except (OSError, ValueError):  # the descriptor cannot be waited on (closed meanwhile, no memory)
            log.exception("parking a new connection")
            self.nr_conns -= 1
            conn.close()

    def murder_keepalived(self, force: bool = False) -> None:
        for conn in self.parking.expired() if force else self.parking.expired(time.monotonic()):
            self.nr_conns -= 1
            conn.close()
        super().murder_keepalived(force)

    def _cap_keepalive(self, deadline: float) -> None:
        self.parking.cap_timeouts(deadline)
        super()._cap_keepalive(deadline)

    def notify(self) -> None:
        if self.heartbeat.due():
            super().notify()

    def accept(self, listener: Any) -> None:
        """Take the waiting connection, unless this worker has a connection per thread already and
        another worker may take it first (`accept_pacing`)."""
        if self.alive and self.accept_pacing.defer(len(self.connections)):
            self.set_accept_enabled(False)
            return
        super().accept(listener)

    def set_accept_enabled(self, enabled: bool) -> None:
        if enabled and not self.accept_pacing.resume():
            return  # deferring: gunicorn's loop asks again after its next wait
        super().set_accept_enabled(enabled)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        super().wait_for_and_dispatch_events(self.accept_pacing.wait_at_most(timeout))

    def load_wsgi(self) -> None:
        super().load_wsgi()
        application: Any = self.wsgi  # type: ignore[has-type]
        extensions = getattr(application, "extensions", {})
        self.cel_leaks = extensions.get(LEAKS_EXTENSION)
        deadlines = self.read_deadlines

        def signalling_body_read(app: Any) -> Any:
            def signal_body_read(environ: dict[str, Any], start_response: Any) -> Any:
                environ["wsgi.input"] = BodyReadSignal(environ["wsgi.input"], _content_length(environ),
                                                       deadlines.disarm)
                return app(environ, start_response)
            return signal_body_read

        self.wsgi = signalling_body_read(application)
        endpoints = extensions.get(REVIEW_ENDPOINTS_EXTENSION)
        self.review_shortcut = (ReviewShortcut(signalling_body_read(endpoints), endpoints.answers)
                                if endpoints is not None and self._nothing_after_requests() else None)

    def handle(self, conn: Any) -> Any:
        """gunicorn's `handle` (one request) under the read deadline."""
        self.read_deadlines.arm(conn)
        try:
            return super().handle(conn)
        finally:
            self.read_deadlines.disarm()
            self._recycle_when_leaked()

    def _keepalive_after(self, conn: Any, keepalive: Any) -> bool:
        """gunicorn drains a body the application left unread before the connection serves another
        request, under a deadline it sets on the socket and then takes off again (two mode changes, each
        releasing the GIL). A body read in full (the review endpoints read the whole body) has nothing to
        drain."""
        if keepalive is True and _body_read_in_full(conn.parser):
            return True
        return bool(super()._keepalive_after(conn, keepalive))

    def handle_request(self, req: Any, conn: Any) -> Any:
        shortcut = self.review_shortcut
        if shortcut is not None and shortcut.takes(req):
            return self._serve_review(shortcut, req, conn)
        raw = conn.sock
        conn.sock = _HeadWithBody(raw)
        try:
            return super().handle_request(req, conn)
        finally:
            held, conn.sock = conn.sock, raw
            held.flush()

    def _serve_review(self, shortcut: ReviewShortcut, req: Any, conn: Any) -> bool:
        """gunicorn's `handle_request` for a review (`review_shortcut`): the same hook before, the same
        count towards `max_requests` and the same keep-alive decision; whether the connection stays open."""
        self.cfg.pre_request(self, req)
        self.nr += 1
        keep_alive = not req.should_close()
        if self.nr >= self.max_requests:
            if self.alive:  # type: ignore[has-type]
                self.log.info("Autorestarting worker after current request.")
                self.alive = False
            keep_alive = False
        if not self.alive or not self.cfg.keepalive or len(self.parking) >= self.max_keepalived:
            keep_alive = False
        shortcut.serve(req, conn.sock, keep_alive=keep_alive)
        return keep_alive

    def _nothing_after_requests(self) -> bool:
        """Whether gunicorn has nothing to do once a request is answered: no access log and no
        `post_request` hook (they take gunicorn's response object, which the review shortcut does not make).
        Placer's server sets neither."""
        return not self.log.access_log_enabled and self.cfg.post_request is PostRequest.default

    def _recycle_when_leaked(self) -> None:
        leaks = getattr(self, "cel_leaks", None)
        if leaks is None or not leaks.exhausted():
            return
        with self.recycling:  # threads finishing together: one of them says it
            if not self.alive:
                return
            self.alive = False
            log.warning(
                "worker %d is replaced: Kubernetes CEL library calls leaked %.1f MiB in %d calls "
                "(its budget: %.1f MiB; --cel-leak-budget-mib)",
                self.pid, leaks.leaked / 2**20, leaks.calls, leaks.budget / 2**20,
            )


class Heartbeat:
    """When the worker's next heartbeat is due: at most one per interval, the first at once."""

    __slots__ = ("_clock", "_interval", "_last")

    def __init__(self, interval: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._last: float | None = None

    def due(self) -> bool:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            return False
        self._last = now
        return True


class _HeadWithBody:
    """The connection's socket, holding the response head until the body is written so that both leave in
    one write (one TLS record, one wake-up of the client) instead of two: gunicorn writes them separately."""

    __slots__ = ("_held", "_socket")

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self._held = b""

    def sendall(self, data: bytes) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif data.startswith(b"HTTP/") and data.endswith(b"\r\n\r\n"):
            self._held = bytes(data)
            return
        self._socket.sendall(data)

    @property
    def wrapped(self) -> Any:
        return self._socket

    def flush(self) -> None:
        """Send a head that no body followed (an empty response)."""
        if self._held:
            held, self._held = self._held, b""
            self._socket.sendall(held)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._socket, name)


def _body_read_in_full(parser: Any) -> bool:
    """Whether the current request's body, of a declared length, has been read to its end."""
    body: Any = getattr(getattr(parser, "mesg", None), "body", None)
    reader: Any = getattr(body, "reader", None)
    return (type(reader) is LengthReader and reader.length == 0 and body.failed is False
            and body.buf.tell() == 0)


def _readable(sock: Any) -> bool:
    """Whether the socket has data (or its end) now; False once it is closed."""
    try:
        readable, _, _ = select.select([sock], [], [], 0.0)
    except (OSError, ValueError):
        return False
    return bool(readable)


def _next_request_buffered(conn: Any) -> bool:
    """Whether bytes of the connection's next request were already read (with the last one, or decrypted by
    TLS): the socket would not report them, so the connection waits its turn in the parking's queue of such
    connections instead of its `epoll` set."""
    return bool(conn.parser.unreader.buf.getvalue()) or (hasattr(conn.sock, "pending") and conn.sock.pending() > 0)


def _content_length(environ: dict[str, Any]) -> int | None:
    """The request's declared body length; None when chunked (or unparsable: gunicorn has refused those)."""
    raw = environ.get("CONTENT_LENGTH")
    if raw in (None, ""):
        return None if environ.get("HTTP_TRANSFER_ENCODING") else 0
    try:
        return int(raw)
    except ValueError:
        return None
