"""The stack's floor: the smallest WSGI app that answers an AdmissionReview (allowed, no patch), served by
the same gunicorn worker model and TLS settings as Placer, so the direct benchmark shows what Placer adds.

    gunicorn --worker-class webhook.server.worker.PlacerThreadWorker --workers 2 --threads 4 \
        --certfile … --keyfile … tests.bench.floor_app:app
"""

import json
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
