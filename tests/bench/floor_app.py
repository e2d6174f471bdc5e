"""The stack's floor: the smallest WSGI app that answers an AdmissionReview (allowed, no patch), served by
the same gunicorn worker model and TLS settings as Placer, so the direct benchmark shows what Placer adds.

    gunicorn --worker-class webhook.server.worker.PlacerThreadWorker --workers 2 --threads 4 \
        --certfile … --keyfile … tests.bench.floor_app:app

`busy(N)` is the same app spending about N µs of its thread's CPU in a Python loop per request (holding the
GIL, as Placer's engine does): the floor at Placer's throughput, to tell what the latency at a given
throughput owes to the stack and the machine from what it owes to Placer's path
(`tests.bench.floor_app:busy(450)`).
"""

import json
import time
from collections.abc import Callable, Iterable
from typing import Any


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    review = json.loads(environ["wsgi.input"].read(length) or b"{}")
    uid = (review.get("request") or {}).get("uid", "")
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": {"uid": uid, "allowed": True}}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def busy(microseconds: int) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """The floor app, preceded by about `microseconds` of pure-Python work per request (calibrated once, in
    the worker, against its thread's CPU clock)."""
    iterations = round(microseconds * _loops_per_microsecond())

    def busy_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        for _ in range(iterations):
            pass
        return app(environ, start_response)

    return busy_app


def _loops_per_microsecond(sample: int = 200_000) -> float:
    fastest = float("inf")
    for _ in range(5):
        started = time.thread_time()
        for _ in range(sample):
            pass
        fastest = min(fastest, time.thread_time() - started)
    return sample / max(fastest * 1e6, 1.0)
