"""`POST /mutate` and `POST /validate`: a request body in, a reply out, with no HTTP server in between.

The API server calls these inside every create. What arrives has been checked by `app.PlacerApp` (the
method, the Content-Type, the body read in full within its limit and deadline); here it is parsed as an
AdmissionReview under the decode budget, answered, and encoded. Every failure is an HTTP status with
`{"error": ...}`: 400 for a body that is no AdmissionReview, 413 or 503 from the decode budget, 500 for a
bug (logged with its stack, never sent).
"""

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from webhook.admission.review import ReviewError
from webhook.server.decode_budget import DecodeBudget, DecodeRefused
from webhook.support.json_bytes import encode_json

log = logging.getLogger(__name__)

Answer = Callable[[bytes, float, float | None], Any]
"""(body, when it arrived, deadline) → the response payload (an AdmissionReview as a dict), or an
`AfterResponse` holding it with what to do once it is sent. It decodes the body (`review.decode_json`,
`review.parse_review`: ReviewError for a body that is no AdmissionReview) unless it can answer without."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}
_UNKNOWN = -1.0
_QUERIES_KEPT = 64


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__
class AfterResponse:
    """A payload, and work that the API server need not wait for (the admission's log line and metrics):
    done once the response has been handed to the server. Made once per review and never changed."""

    payload: Any
    then: Callable[[], None]


@dataclass(slots=True)  # not frozen, as AfterResponse
class Reply:
    """What to answer: a status, a JSON body, extra headers, and work to do once the reply is handed over.
    Made once per request and never changed."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    then: Callable[[], None] | None = None


def error_reply(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    return Reply(status, encode_json({"error": message}), headers)


class ReviewEndpoints:
    """The review paths and their answers, sharing one worker's decode budget."""

    def __init__(self, answers: dict[str, Answer], budget: DecodeBudget) -> None:
        self.answers = answers
        self.budget = budget
        self._small = budget.small_below
        """Bodies shorter than this are small whatever they hold (`DecodeBudget.is_small`)."""
        self._timeouts: dict[str, float | None] = {}
        """Seconds of the deadline per query string: the API server sends the same one (`timeout=5s`) with every
        review, and parsing it (`parse_qsl`, the duration) cost 3 % of a 2-rule review."""

    def __contains__(self, path: str) -> bool:
        return path in self.answers

    def reply(self, path: str, body: bytes, query: str, started: float) -> Reply:
        """Parse the AdmissionReview in `body`, answer it and encode the answer; never raises.

        The budget's reservation is held until the answer is built and the decoded review let go: the review
        and CEL's copies of it live that long, and the heap is trimmed when the reservation ends."""
        seconds = self._timeouts.get(query, _UNKNOWN)
        if seconds is _UNKNOWN:
            seconds = _budget(_query_value(query, "timeout"))
            if len(self._timeouts) >= _QUERIES_KEPT:
                self._timeouts.clear()  # a client sending ever new queries: none of them is kept long
            self._timeouts[query] = seconds
        deadline = None if seconds is None else started + seconds
        try:
            if len(body) < self._small:  # nearly every review: nothing to reserve, no context to enter
                payload = self.answers[path](body, started, deadline)
            else:
                with self.budget.reserve(body, deadline):
                    payload = self._answer(path, body, started, deadline)
        except ReviewError as error:
            return error_reply(400, str(error))
        except DecodeRefused as refused:
            return error_reply(refused.status, str(refused))
        except Exception:
            log.exception("unexpected error serving POST %s", path)
            return error_reply(500, "internal error")
        if isinstance(payload, AfterResponse):
            return Reply(200, encode_json(payload.payload), then=payload.then)
        return Reply(200, encode_json(payload))

    def _answer(self, path: str, body: bytes, started: float, deadline: float | None) -> Any:
        """The answer's payload; the decoded review is let go when this returns (within a reservation)."""
        return self.answers[path](body, started, deadline)


def _query_value(query: str, name: str) -> str | None:
    if name not in query:
        return None
    return next((value for key, value in parse_qsl(query) if key == name), None)


def _budget(timeout: str | None) -> float | None:
    """How long after its arrival to stop evaluating a review, from the API server's `?timeout=5s`: a margin
    before it gives up."""
    match = _DURATION.match(timeout or "")
    if match is None:
        return None
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    return max(seconds * 0.8, seconds - 1.0)
