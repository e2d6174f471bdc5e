"""The Flask application: decode, call the pipeline, encode, and map errors to HTTP codes.

Routes hold no logic of their own. A malformed request gets a precise 4xx with `{"error": ...}`; nothing
that arrives can produce a stack trace in a response or take a worker down.
"""

import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook.config import Settings
from webhook.kube.namespace_lookup import NamespaceLookup
from webhook.logs import ADMISSION_LOGGER
from webhook.metrics import Metrics
from webhook.pipeline import Admission, admit
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import SnapshotHolder
from webhook.review import AdmissionRequest, ReviewError, decode_json, parse_review
from webhook.server.decode_budget import DecodeBudget, DecodeRefused
from webhook.validation import validate_policy_review
from webhook.workloads import WorkloadTable, default_workload_table

log = logging.getLogger(__name__)
admission_log = logging.getLogger(ADMISSION_LOGGER)

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}
_DRAIN_LIMIT = 64 * 1024 * 1024


def create_app(
    *,
    holder: SnapshotHolder,
    settings: Settings,
    metrics: Metrics,
    workloads: WorkloadTable | None = None,
    compiler: PolicyCompiler | None = None,
    namespaces: NamespaceLookup | None = None,
) -> Flask:
    """Build the application around a snapshot holder that a policy source keeps current."""
    app = Flask("placer")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    table = workloads or default_workload_table()
    policy_compiler = compiler or PolicyCompiler()

    budget = DecodeBudget()

    @app.post("/mutate")
    def mutate() -> Response:
        def answer(review: AdmissionRequest, started: float, deadline: float | None) -> Response:
            admission = admit(
                review,
                holder.current,
                table,
                opt_in=settings.opt_in,
                deadline=deadline,
                resolve_namespace=namespaces.resolve if namespaces is not None else None,
            )
            response = _json_response(admission.response)
            _record(metrics, admission, time.monotonic() - started)
            return response

        return _serve_review(settings.max_body_bytes, budget, answer)

    @app.post("/validate")
    def validate() -> Response:
        return _serve_review(
            settings.max_body_bytes,
            budget,
            lambda review, started, deadline: _json_response(validate_policy_review(review, policy_compiler)),
        )

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        snapshot = holder.current
        if not snapshot.ready:
            return _error(503, "policies not loaded yet")
        return Response(
            f"ok: {len(snapshot.policies)} policies, {len(snapshot.errors)} errors\n", mimetype="text/plain"
        )

    @app.get("/metrics")
    def prometheus() -> Response:
        snapshot = holder.current
        metrics.observe_policies(len(snapshot.policies), len(snapshot.errors))
        payload, content_type = metrics.render()
        return Response(payload, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        response = _error(error.code or 500, error.description or error.name)
        if error.code == 405:
            response.headers["Allow"] = ", ".join(error.valid_methods or [])  # type: ignore[attr-defined]
        return response

    @app.errorhandler(Exception)
    def unexpected(error: Exception) -> Response:
        log.exception("unexpected error serving %s %s", request.method, request.path)
        return _error(500, "internal error")

    return app


def _serve_review(
    limit: int, budget: DecodeBudget, answer: Callable[[AdmissionRequest, float, float | None], Response]
) -> Response:
    """Read the body, reserve its memory, parse the AdmissionReview and answer it; every refusal is a 4xx/5xx.

    The reservation is held until the answer is encoded: the decoded review and CEL's copies of it live
    that long.
    """
    started = time.monotonic()
    body = _read_body(limit)
    if isinstance(body, Response):
        return body
    deadline = _deadline(started, request.args.get("timeout"))
    try:
        with budget.reserve(body, deadline):
            review = _parse(body)
            return review if isinstance(review, Response) else answer(review, started, deadline)
    except DecodeRefused as refused:
        return _error(refused.status, str(refused))


def _read_body(limit: int) -> bytes | Response:
    """The request body, or the error response for a body Placer will not read."""
    content_type = (request.mimetype or "").lower()
    if content_type != "application/json":
        return _error(415, f"Content-Type must be application/json, not {request.content_type or 'absent'!r}")
    if request.content_length is not None and request.content_length > limit:
        _discard_body(request.content_length)
        return _error(413, f"body of {request.content_length} bytes exceeds the {limit} byte limit")
    return request.get_data(cache=False)


def _parse(body: bytes) -> Any:
    """The parsed request, or the error response for a body that is not a usable AdmissionReview."""
    try:
        return parse_review(decode_json(body))
    except ReviewError as error:
        return _error(400, str(error))


def _discard_body(length: int) -> None:
    """Read an oversized body in small chunks and drop it, so the client can read the 413.

    Replying before the client has sent its body makes it see a broken connection instead of the answer.
    Past a few times the limit the connection is not worth saving: gunicorn closes it after the reply.
    """
    stream = request.environ.get("wsgi.input")
    remaining = min(length, _DRAIN_LIMIT)
    while stream is not None and remaining > 0:
        chunk = stream.read(min(65536, remaining))
        if not chunk:
            break
        remaining -= len(chunk)


def _deadline(started: float, timeout: str | None) -> float | None:
    """When to stop evaluating, from the API server's `?timeout=5s`: a margin before it gives up."""
    match = _DURATION.match(timeout or "")
    if match is None:
        return None
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    return started + max(seconds * 0.8, seconds - 1.0)


def _record(metrics: Metrics, admission: Admission, seconds: float) -> None:
    review, mutation = admission.request, admission.mutation
    metrics.observe_admission(
        review.kind,
        review.operation,
        admission.result,
        seconds,
        ((trace.policy, trace.rule, trace.outcome) for trace in mutation.traces),
    )
    admission_log.info(
        "admission",
        extra={
            "fields": {
                "uid": review.uid,
                "kind": review.kind,
                "namespace": review.namespace,
                "name": review.name or _generate_name(review.object),
                "operation": review.operation,
                "dryRun": review.dry_run,
                "result": admission.result,
                "applied": mutation.applied,
                "warnings": _capped(mutation.warnings),
                "reason": mutation.passed_through or mutation.denial,
                "durationMs": round(seconds * 1000, 3),
            }
        },
    )


def _capped(warnings: list[str], limit: int = 50) -> list[str]:
    """Keep a log line readable for an object with a thousand templates: the first warnings and a count."""
    if len(warnings) <= limit:
        return warnings
    return [*warnings[:limit], f"{len(warnings) - limit} more"]


def _generate_name(obj: Any) -> str:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    value = metadata.get("generateName") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) else ""


def _json_response(payload: Any) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), mimetype="application/json")


def _error(code: int, message: str) -> Response:
    return Response(json.dumps({"error": message}), status=code, mimetype="application/json")
