"""The stack's floor: the smallest application that answers an AdmissionReview (allowed, no patch), served by
the same server as Placer (granian, RSGI, TLS, the same worker count), so the direct benchmark shows what
Placer adds.

    granian --interface rsgi --workers 2 --http 1 --no-ws --ssl-protocol-min tls1.2 \
        --ssl-certificate … --ssl-keyfile … tests.bench.floor_app:app

`busy` (a factory: `--factory tests.bench.floor_app:busy`) is the same app spending about
`$FLOOR_BUSY_US` µs of the worker's CPU in a Python loop per request (holding the GIL, as Placer's engine
does): the floor at Placer's throughput, to tell what the latency at a given throughput owes to the stack
and the machine from what it owes to Placer's path.
"""

import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

App = Callable[[Any, Any], Awaitable[None]]


async def app(scope: Any, protocol: Any) -> None:
    body = await protocol()
    review = json.loads(body or b"{}")
    uid = (review.get("request") or {}).get("uid", "") if isinstance(review, dict) else ""
    answer = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "response": {"uid": uid, "allowed": True}}).encode()
    protocol.response_bytes(200, [("content-type", "application/json")], answer)


def busy() -> App:
    """The floor app, preceded by about `$FLOOR_BUSY_US` microseconds of pure-Python work per request
    (calibrated once, in the worker, against its thread's CPU clock)."""
    iterations = round(int(os.environ.get("FLOOR_BUSY_US", "450")) * _loops_per_microsecond())

    async def busy_app(scope: Any, protocol: Any) -> None:
        for _ in range(iterations):
            pass
        await app(scope, protocol)

    return busy_app


def _loops_per_microsecond(sample: int = 200_000) -> float:
    fastest = float("inf")
    for _ in range(5):
        started = time.thread_time()
        for _ in range(sample):
            pass
        fastest = min(fastest, time.thread_time() - started)
    return sample / max(fastest * 1e6, 1.0)
