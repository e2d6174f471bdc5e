"""The application a granian worker runs (RSGI): the review endpoints, health, readiness and metrics.

granian (Rust: HTTP/1.1, TLS, connections) calls `PlacerApp` once a request's head has arrived, in the
worker's event loop. A review's body is read asynchronously within its limit and deadline
(`request_body`), then the engine answers it synchronously: CPU work in the worker's one Python thread,
while granian keeps reading and writing every other connection. Routes hold no logic of their own. A
malformed request gets a precise 4xx with `{"error": ...}`; nothing that arrives can produce a stack trace
in a response or take a worker down.

There is no web framework: five fixed routes are a dictionary, and a framework's request and response
objects cost about as much as a 2-rule admission (docs/serving.md has the figures).
"""

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from webhook.admission.pipeline import Admission, Entry, admit, answer_sibling
from webhook.admission.review import decode_json, parse_review
from webhook.admission.sibling_cache import SiblingCache, rule_counts
from webhook.admission.validation import validate_policy_review
from webhook.cluster.client.discovery import read_served_apis
from webhook.cluster.client.namespace_lookup import NamespaceLookup
from webhook.cluster.reports.background import readiness_detail
from webhook.engine.exemption_seal import Seals
from webhook.placement.claims import ClaimLookup
from webhook.placement.feasibility import PlacementCheck
from webhook.pods.capacity_share import ShareLedger
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import SnapshotHolder
from webhook.server.decode_budget import DecodeBudget
from webhook.server.request_body import BodyRefused, BodySource, ReadDeadlines, read_body
from webhook.server.respawn_drain import WorkerDrain
from webhook.server.review_endpoint import AfterResponse, Reply, ReviewEndpoints, error_reply
from webhook.support.config import Settings
from webhook.support.logs import AdmissionLog
from webhook.support.metrics import Metrics
from webhook.workloads import WorkloadTable, default_workload_table

log = logging.getLogger(__name__)

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
CLOSE = (("connection", "close"),)


class Headers(Protocol):
    def get(self, key: str, default: Any = None) -> Any: ...


class RequestScope(Protocol):
    """What of granian's RSGI scope the application reads."""

    @property
    def proto(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def query_string(self) -> str: ...
    @property
    def headers(self) -> Headers: ...


class HttpProtocol(BodySource, Protocol):
    """What of granian's RSGI HTTP protocol the application uses: the body, and one response."""

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None: ...


Page = Callable[[], tuple[int, str, bytes]]
"""A GET route: (status, content type, body)."""


class PlacerApp:
    """An RSGI application: `await app(scope, protocol)` answers one request."""

    def __init__(self, reviews: ReviewEndpoints, pages: dict[str, Page], *, limit: int, read_timeout: float,
                 after_review: Callable[[], None] | None = None, drain: WorkerDrain | None = None) -> None:
        self.reviews = reviews
        self.pages = pages
        self.limit = limit
        self.read_timeout = read_timeout
        self.after_review = after_review
        """Called once each review is answered and recorded (the worker's check of its CEL leak budget)."""
        self.drain = drain or WorkerDrain()
        """Set while this worker is being replaced: each response then closes its connection (respawn_drain)."""
        self.deadlines = ReadDeadlines()
        """The deadlines of the bodies being read, behind one timer."""

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """RSGI's hook, called by granian in the worker with its event loop before the first request."""
        self.drain.install(loop)
        log.info("worker %d serves on %s.%s", os.getpid(), type(loop).__module__, type(loop).__qualname__)

    def __call__(self, scope: RequestScope, protocol: HttpProtocol) -> Awaitable[None]:
        return self.serve(scope, protocol)

    async def serve(self, scope: RequestScope, protocol: HttpProtocol) -> None:
        if scope.proto != "http":
            return
        started = time.monotonic()
        content_type = JSON
        try:
            if scope.path in self.reviews.answers:
                reply = await self._review(scope, protocol, started)
            else:
                reply, content_type = self._page(scope)
        except Exception:
            log.exception("unexpected error serving %s %s", scope.method, scope.path)
            reply = error_reply(500, "internal error")
        headers = [("content-type", content_type), *reply.headers]
        if self.drain.draining and CLOSE[0] not in reply.headers:
            headers.append(CLOSE[0])
        protocol.response_bytes(reply.status, headers, reply.body)
        if reply.then is not None:
            try:
                reply.then()
            except Exception:
                log.exception("recording an admission that was answered")
            if self.after_review is not None:
                self.after_review()

    async def _review(self, scope: RequestScope, protocol: HttpProtocol, started: float) -> Reply:
        if scope.method != "POST":
            return error_reply(405, "The method is not allowed for the requested URL.", (("allow", "POST"),))
        headers = scope.headers
        try:
            body = await read_body(protocol, headers.get("content-length"), limit=self.limit,
                                   timeout=self.read_timeout,
                                   expects_continue=(headers.get("expect") or "").lower() == "100-continue",
                                   deadlines=self.deadlines)
        except BodyRefused as refused:
            return error_reply(refused.status, str(refused), CLOSE)
        content_type = headers.get("content-type") or ""
        if content_type.split(";", 1)[0].strip().lower() != JSON:
            return error_reply(415, f"Content-Type must be application/json, not {content_type or 'absent'!r}")
        return self.reviews.reply(scope.path, body, scope.query_string, started)

    def _page(self, scope: RequestScope) -> tuple[Reply, str]:
        page = self.pages.get(scope.path)
        if page is None:
            return error_reply(404, "The requested URL was not found on the server."), JSON
        if scope.method not in ("GET", "HEAD"):
            return error_reply(405, "The method is not allowed for the requested URL.", (("allow", "GET, HEAD"),)), JSON
        status, content_type, body = page()
        return Reply(status, body), content_type


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
    ledger: ShareLedger | None = None,
    seals: Callable[[], Seals | None] | None = None,
    after_review: Callable[[], None] | None = None,
) -> PlacerApp:
    """Build the application around a snapshot holder that a policy source keeps current."""
    table = workloads or default_workload_table()
    policy_compiler = compiler or PolicyCompiler()
    admission_log = AdmissionLog()

    resolve_namespace = namespaces.resolve if namespaces is not None else None

    def answer(entry: Entry) -> Callable[[bytes, float, float | None], Any]:
        siblings = SiblingCache()  # one per entry: the fail-closed one may answer a review otherwise
        recognise = entry == "mutate"

        def mutate(body: bytes, started: float, deadline: float | None) -> Any:
            snapshot = holder.current
            admission = answer_sibling(
                body, snapshot, table, siblings, opt_in=settings.opt_in, deadline=deadline,
                resolve_namespace=resolve_namespace, placement=placement, ledger=ledger,
            ) if recognise else None
            if admission is None:
                admission = admit(
                    parse_review(decode_json(body)),
                    snapshot,
                    table,
                    opt_in=settings.opt_in,
                    deadline=deadline,
                    resolve_namespace=resolve_namespace,
                    placement=placement,
                    claims=claims,
                    ledger=ledger,
                    entry=entry,
                    seals=seals() if seals is not None else None,
                    siblings=siblings,
                    body=body,
                )
            return AfterResponse(admission.response, _record(metrics, admission_log, admission,
                                                             time.monotonic() - started))
        return mutate

    def validate(body: bytes, _started: float, _deadline: float | None) -> Any:
        return validate_policy_review(parse_review(decode_json(body)), policy_compiler)

    def healthz() -> tuple[int, str, bytes]:
        return 200, TEXT, b"ok\n"

    def readyz() -> tuple[int, str, bytes]:
        snapshot = holder.current
        if not snapshot.ready:
            return 503, JSON, error_reply(503, "policies not loaded yet").body
        lines = [f"ok: {len(snapshot.every_policy)} policies, {len(snapshot.errors)} errors"]
        if settings.cluster_state is not None:
            # what the controller discovered, and the minor this worker checks policies' fields against
            lines.append(f"api server: {read_served_apis(settings.cluster_state).summary()}")
            reports = readiness_detail(settings.cluster_state)
            if reports is not None:
                lines.append(reports)
        lines.append(f"field checks: Kubernetes {policy_compiler.fields.version}")
        return 200, TEXT, ("\n".join(lines) + "\n").encode()

    def prometheus() -> tuple[int, str, bytes]:
        snapshot = holder.current
        metrics.observe_policies(len(snapshot.every_policy), len(snapshot.errors))
        payload, content_type = metrics.render()
        return 200, content_type, payload

    reviews = ReviewEndpoints({"/mutate": answer("mutate"), "/enforce": answer("enforce"), "/validate": validate},
                              DecodeBudget())
    pages = {"/healthz": healthz, "/readyz": readyz, "/metrics": prometheus}
    return PlacerApp(reviews, pages, limit=settings.max_body_bytes, read_timeout=settings.read_timeout,
                     after_review=after_review)


def _record(metrics: Metrics, admission_log: AdmissionLog, admission: Admission, seconds: float
            ) -> Callable[[], None]:
    """The admission's metrics and log line, to write once the response is handed over (the API server does
    not wait for them: ~10 % of a 50-rule admission). What they need is taken now, so the decoded review can
    go before the response is sent."""
    review, mutation = admission.request, admission.mutation
    kind, operation, result = review.kind, review.operation, admission.result
    rules, problems = admission.counts or rule_counts(mutation)
    unplaceable, over_capacity = admission.unplaceable, admission.over_capacity
    volume_outcomes = list(mutation.volume_outcomes.values())
    fields = {
        "uid": review.uid,
        "kind": kind,
        "namespace": review.namespace,
        "name": review.name or _generate_name(review.object),  # a Pod of a controller's: its generateName
        "operation": operation,
        "dryRun": review.dry_run,
        "result": result,
        "applied": mutation.applied,
        "warnings": _capped(mutation.warnings),
        "reason": mutation.passed_through or mutation.denial,
        "durationMs": round(seconds * 1000, 3),
    }
    if mutation.audits:  # each Audit policy's verdict and rules; its patch (object values) stays out of logs
        fields["audited"] = {record.policy: {"verdict": record.verdict, "rules": record.rules}
                             for record in mutation.audits}

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
