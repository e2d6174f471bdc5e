"""The Flask application: the review endpoints (served in front of Flask, `review_endpoint`), health, readiness
and metrics, and errors mapped to HTTP codes.

Routes hold no logic of their own. A malformed request gets a precise 4xx with `{"error": ...}`; nothing
that arrives can produce a stack trace in a response or take a worker down.
"""

import logging
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook.claims import ClaimLookup
from webhook.config import Settings
from webhook.feasibility import PlacementCheck
from webhook.json_bytes import encode_json
from webhook.kube.namespace_lookup import NamespaceLookup
from webhook.logs import AdmissionLog
from webhook.metrics import Metrics
from webhook.pipeline import Admission, admit
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import SnapshotHolder
from webhook.review import AdmissionRequest
from webhook.rule_problems import PROBLEM_OUTCOMES
from webhook.server.decode_budget import DecodeBudget
from webhook.server.review_endpoint import REVIEW_ENDPOINTS_EXTENSION, AfterResponse, ReviewEndpoints
from webhook.validation import validate_policy_review
from webhook.workloads import WorkloadTable, default_workload_table

log = logging.getLogger(__name__)


def create_app(
    *,
    holder: SnapshotHolder,
    settings: Settings,
    metrics: Metrics,
    workloads: WorkloadTable | None = None,
    compiler: PolicyCompiler | None = None,
    namespaces: NamespaceLookup | None = None,
    placement: PlacementCheck | None = None,
    claims: ClaimLookup | None = None,
) -> Flask:
    """Build the application around a snapshot holder that a policy source keeps current."""
    app = Flask("placer")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    table = workloads or default_workload_table()
    policy_compiler = compiler or PolicyCompiler()
    admission_log = AdmissionLog()

    def mutate(review: AdmissionRequest, started: float, deadline: float | None) -> Any:
        admission = admit(
            review,
            holder.current,
            table,
            opt_in=settings.opt_in,
            deadline=deadline,
            resolve_namespace=namespaces.resolve if namespaces is not None else None,
            placement=placement,
            claims=claims,
        )
        return AfterResponse(admission.response, _record(metrics, admission_log, admission,
                                                         time.monotonic() - started))

    def validate(review: AdmissionRequest, _started: float, _deadline: float | None) -> Any:
        return validate_policy_review(review, policy_compiler)

    endpoints = ReviewEndpoints(
        app.wsgi_app, {"/mutate": mutate, "/validate": validate}, settings.max_body_bytes, DecodeBudget()
    )
    app.wsgi_app = endpoints  # type: ignore[method-assign]
    app.extensions[REVIEW_ENDPOINTS_EXTENSION] = endpoints

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


def _record(metrics: Metrics, admission_log: AdmissionLog, admission: Admission, seconds: float
            ) -> Callable[[], None]:
    """The admission's metrics and log line, to write once the response is sent (the API server does not
    wait for them: ~10 % of a 50-rule admission). What they need is taken now, so the decoded review can go
    before the response is written."""
    review, mutation = admission.request, admission.mutation
    kind, operation, result = review.kind, review.operation, admission.result
    rules = [(trace.policy, trace.rule, trace.outcome) for trace in mutation.traces]
    problems = [(t.policy, t.rule, t.outcome, t.detail) for t in mutation.traces if t.outcome in PROBLEM_OUTCOMES]
    unplaceable, over_capacity = admission.unplaceable, admission.over_capacity
    volume_outcomes = list(mutation.volume_outcomes.values())
    fields = {
        "uid": review.uid,
        "kind": kind,
        "namespace": review.namespace,
        "name": review.name or _generate_name(review.object),
        "operation": operation,
        "dryRun": review.dry_run,
        "result": result,
        "applied": mutation.applied,
        "warnings": _capped(mutation.warnings),
        "reason": mutation.passed_through or mutation.denial,
        "durationMs": round(seconds * 1000, 3),
    }

    def write() -> None:
        metrics.observe_admission(kind, operation, result, seconds, rules, problems=problems)
        if unplaceable:
            metrics.observe_unplaceable(kind, unplaceable)
        if over_capacity:
            metrics.observe_over_capacity(kind, over_capacity)
        if volume_outcomes:
            metrics.observe_volume_pins(volume_outcomes)
        admission_log.info("admission", fields)

    return write


def _capped(warnings: list[str], limit: int = 50) -> list[str]:
    """Keep a log line readable for an object with a thousand templates: the first warnings and a count."""
    if len(warnings) <= limit:
        return warnings
    return [*warnings[:limit], f"{len(warnings) - limit} more"]


def _generate_name(obj: Any) -> str:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    value = metadata.get("generateName") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) else ""


def _error(code: int, message: str) -> Response:
    return Response(encode_json({"error": message}), status=code, mimetype="application/json")
