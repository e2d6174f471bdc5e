"""`POST /mutate` and `POST /validate` answered straight from the WSGI environ, in front of Flask.

The API server calls these inside every create; the other endpoints are rare. Flask's request and response
objects, routing and context locals cost about as much as Placer's whole 2-rule admission, so the two
review endpoints are served here with the same checks and the same errors (415, 413, 400, 503, 500 as
`{"error": ...}`), the response one body with its Content-Length. Everything else goes to the Flask app.
"""

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

from webhook.json_bytes import encode_json
from webhook.review import AdmissionRequest, ReviewError, decode_json, parse_review
from webhook.server.decode_budget import DecodeBudget, DecodeRefused

log = logging.getLogger(__name__)

Answer = Callable[[AdmissionRequest, float, float | None], Any]
"""(request, when it arrived, deadline) → the response payload (an AdmissionReview as a dict), or an
`AfterResponse` holding it with what to do once it is sent."""
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

REVIEW_ENDPOINTS_EXTENSION = "placer.review_endpoints"
"""Where the Flask app keeps its `ReviewEndpoints`, for the worker to serve them directly (`review_shortcut`)."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}
_DRAIN_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AfterResponse:
    """A payload, and work that the API server need not wait for (the admission's log line and metrics):
    done when the server has written the response, as WSGI closes the body it returned."""

    payload: Any
    then: Callable[[], None]


class _BodyThen(list[bytes]):
    """The response body; closing it (the server does, once it is written) runs the deferred work."""

    def __init__(self, body: bytes, then: Callable[[], None]) -> None:
        super().__init__((body,))
        self._then: Callable[[], None] | None = then

    def close(self) -> None:
        then, self._then = self._then, None
        if then is None:
            return
        try:
            then()
        except Exception:
            log.exception("recording an admission that was answered")


class _Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ReviewEndpoints:
    """WSGI middleware answering the AdmissionReview endpoints; any other request goes to `fallback`."""

    def __init__(self, fallback: WsgiApp, answers: dict[str, Answer], limit: int, budget: DecodeBudget) -> None:
        self.fallback = fallback
        self.answers = answers
        self.limit = limit
        self.budget = budget

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answer = self.answers.get(environ.get("PATH_INFO", ""))
        if answer is None:
            return self.fallback(environ, start_response)
        headers: list[tuple[str, str]] = []
        then: Callable[[], None] | None = None
        if environ.get("REQUEST_METHOD") != "POST":
            status, body = 405, _error("The method is not allowed for the requested URL.")
            headers.append(("Allow", "POST"))
        else:
            try:
                payload = self._serve(environ, answer)
                if isinstance(payload, AfterResponse):
                    payload, then = payload.payload, payload.then
                status, body = 200, encode_json(payload)
            except _Refusal as refusal:
                status, body = refusal.status, _error(str(refusal))
            except Exception:
                log.exception("unexpected error serving POST %s", environ.get("PATH_INFO"))
                status, body = 500, _error("internal error")
        start_response(f"{status} {HTTPStatus(status).phrase}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers])
        return [body] if then is None else _BodyThen(body, then)

    def _serve(self, environ: dict[str, Any], answer: Answer) -> Any:
        """Read the body, reserve its memory, parse the AdmissionReview and answer it. The reservation is
        held until the answer is built and the decoded review let go: the review and CEL's copies of it live
        that long, and the heap is trimmed when the reservation ends (a review still held then would stay in
        the worker's memory)."""
        started = time.monotonic()
        body = self._read_body(environ)
        deadline = _deadline(started, _query_value(environ.get("QUERY_STRING", ""), "timeout"))
        try:
            with self.budget.reserve(body, deadline):
                try:
                    review = parse_review(decode_json(body))
                except ReviewError as error:
                    raise _Refusal(400, str(error)) from None
                response = answer(review, started, deadline)
                del review
            return response
        except DecodeRefused as refused:
            raise _Refusal(refused.status, str(refused)) from None

    def _read_body(self, environ: dict[str, Any]) -> bytes:
        content_type = environ.get("CONTENT_TYPE", "")
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            raise _Refusal(415, f"Content-Type must be application/json, not {content_type or 'absent'!r}")
        stream = environ["wsgi.input"]
        length = _content_length(environ)
        if length is not None and length > self.limit:
            _discard(stream, length)
            raise _Refusal(413, f"body of {length} bytes exceeds the {self.limit} byte limit")
        body: bytes = stream.read(length) if length is not None else stream.read(self.limit + 1)
        if len(body) > self.limit:
            raise _Refusal(413, f"body exceeds the {self.limit} byte limit")
        return body


def _content_length(environ: dict[str, Any]) -> int | None:
    raw = environ.get("CONTENT_LENGTH")
    if raw in (None, ""):
        return None
    try:
        return max(int(raw), 0)
    except ValueError:
        return None


def _discard(stream: Any, length: int) -> None:
    """Read an oversized body in small chunks and drop it, so the client can read the 413.

    Replying before the client has sent its body makes it see a broken connection instead of the answer.
    Past a few times the limit the connection is not worth saving: gunicorn closes it after the reply.
    """
    remaining = min(length, _DRAIN_LIMIT)
    while remaining > 0:
        chunk = stream.read(min(65536, remaining))
        if not chunk:
            break
        remaining -= len(chunk)


def _query_value(query: str, name: str) -> str | None:
    if name not in query:
        return None
    return next((value for key, value in parse_qsl(query) if key == name), None)


def _deadline(started: float, timeout: str | None) -> float | None:
    """When to stop evaluating, from the API server's `?timeout=5s`: a margin before it gives up."""
    match = _DURATION.match(timeout or "")
    if match is None:
        return None
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    return started + max(seconds * 0.8, seconds - 1.0)


def _error(message: str) -> bytes:
    return encode_json({"error": message})
