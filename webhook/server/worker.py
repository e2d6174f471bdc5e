"""gunicorn's threaded worker, with a deadline on slow clients (see `read_deadline`).

The deadline is armed when a thread takes a connection (before the TLS handshake) and disarmed when the
application has read the request body in full; the WSGI callable is wrapped so the body stream reports
that moment. A connection that goes back to the poller (idle keep-alive) has no deadline: waiting there
costs no thread, and gunicorn's keep-alive timeout closes it.
"""

from typing import Any

from gunicorn.workers.gthread import ThreadWorker

from webhook.server.read_deadline import BodyReadSignal, ReadDeadlines


class PlacerThreadWorker(ThreadWorker):  # type: ignore[misc]
    """`gthread` whose threads cannot be held by a client that sends its request slowly."""

    def init_process(self) -> None:
        self.read_deadlines = ReadDeadlines(self.app.settings.read_timeout)
        self.read_deadlines.start()
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        application: Any = self.wsgi  # type: ignore[has-type]
        deadlines = self.read_deadlines

        def signal_body_read(environ: dict[str, Any], start_response: Any) -> Any:
            environ["wsgi.input"] = BodyReadSignal(environ["wsgi.input"], _content_length(environ), deadlines.disarm)
            return application(environ, start_response)

        self.wsgi = signal_body_read

    def handle(self, conn: Any) -> Any:
        self.read_deadlines.arm(conn)
        try:
            return super().handle(conn)
        finally:
            self.read_deadlines.disarm()


def _content_length(environ: dict[str, Any]) -> int | None:
    """The request's declared body length; None when chunked (or unparsable: gunicorn has refused those)."""
    raw = environ.get("CONTENT_LENGTH")
    if raw in (None, ""):
        return None if environ.get("HTTP_TRANSFER_ENCODING") else 0
    try:
        return int(raw)
    except ValueError:
        return None
