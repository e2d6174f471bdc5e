"""The API server's review requests served by the worker straight from gunicorn's parsed request.

For every request gunicorn builds a full WSGI environ (forty keys, the headers copied one by one), a
`Response` object that checks each header the application sets, formats a `Date`, and writes through a
chunking-aware path, then logs the access (or decides not to). The review endpoints read six environ keys
and answer with one body of known length: for a `POST` to them, the worker (`worker.PlacerThreadWorker`)
hands gunicorn's parsed request here instead; about a tenth of a 2-rule admission's CPU.

What gunicorn decides stays gunicorn's: the request is parsed, limited and framed by its parser; whether
the connection stays open is decided by the worker exactly as gunicorn's `handle_request` does; an
exception before the response is written goes back to gunicorn, which answers 500 and closes. Requests
this does not take (another path or method, HTTP/1.0, `Expect: 100-continue`) go through gunicorn whole.
"""

import email.utils
import time
from collections.abc import Iterable
from typing import Any

from webhook.logs import PerSecond
from webhook.server.review_endpoint import WsgiApp


class ReviewShortcut:
    """Serves `POST` requests to the review endpoints' paths with a minimal environ and one write."""

    def __init__(self, endpoints: WsgiApp, paths: Iterable[str]) -> None:
        self.endpoints = endpoints
        self.paths = frozenset(paths)
        self.dates = PerSecond(lambda second: email.utils.formatdate(second, usegmt=True))
        """The `Date` header's value."""

    def takes(self, req: Any) -> bool:
        """Whether `req` (gunicorn's parsed request) is one this serves."""
        return (req.method == "POST" and req.path in self.paths and req.version == (1, 1)
                and not req._expected_100_continue)

    def serve(self, req: Any, sock: Any, *, keep_alive: bool) -> None:
        """Answer `req` on `sock`: head and body in one write.

        The response says `Connection: keep-alive` or `close` as the worker decided. The body iterable's
        `close` runs once the response is written, or when writing it failed (WSGI)."""
        environ: dict[str, Any] = {
            "REQUEST_METHOD": "POST", "PATH_INFO": req.path, "QUERY_STRING": req.query or "",
            "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.input": req.body,
        }
        for name, value in req.headers:
            if name == "CONTENT-TYPE":
                environ["CONTENT_TYPE"] = value
            elif name == "CONTENT-LENGTH":
                environ["CONTENT_LENGTH"] = value
            elif name == "TRANSFER-ENCODING":
                environ["HTTP_TRANSFER_ENCODING"] = value
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            started[:] = [status, headers]

        answer = self.endpoints(environ, start_response)
        try:
            payload = b"".join(answer)
            status, headers = started
            lines = [f"HTTP/1.1 {status}", f"Date: {self.dates(int(time.time()))}",
                     "Connection: keep-alive" if keep_alive else "Connection: close",
                     *(f"{name}: {value}" for name, value in headers)]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        finally:
            close = getattr(answer, "close", None)
            if close is not None:
                close()
