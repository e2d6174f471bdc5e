"""The stack's floor: the smallest application that answers an AdmissionReview (allowed, no patch), served by
the same server as Placer (granian, RSGI, TLS, the same worker count), so the direct benchmark shows what
Placer adds.

    granian --interface rsgi --workers 2 --http 1 --no-ws --ssl-protocol-min tls1.2 \
        --ssl-certificate … --ssl-keyfile … tests.bench.floor_app:app

`routed` (a factory: `--factory tests.bench.floor_app:routed`) answers each URL path with the JSON Patch of
`$FLOOR_ROUTES` (a JSON file: `{"/two": [patch operations], "/none": null}`), as the Go reference webhook
does: the floor of a Python webhook answering Placer's patch, for bench_apiserver.

`busy` (a factory: `--factory tests.bench.floor_app:busy`) is the same app spending about
`$FLOOR_BUSY_US` µs of the worker's CPU in a Python loop per request (holding the GIL, as Placer's engine
does): the floor at Placer's throughput, to tell what the latency at a given throughput owes to the stack
and the machine from what it owes to Placer's path.
"""

import base64
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

App = Callable[[Any, Any], Awaitable[None]]


async def app(scope: Any, protocol: Any) -> None:
    body = await protocol()
    review = json.loads(body or b"{}")
    uid = (review.get("request") or {}).get("uid", "") if isinstance(review, dict) else ""
    answer = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "response": {"uid": uid, "allowed": True}}).encode()
    protocol.response_bytes(200, [("content-type", "application/json")], answer)


def granian_command(*, host: str, port: int, cert: Path, key: Path, workers: int, target: list[str]) -> list[str]:
    """The command line that serves `target` (an app, or `--factory` and a factory) as `placer serve` serves
    Placer (webhook/server/serve.py): RSGI, HTTP/1.1, no websockets, TLS 1.2 or newer."""
    return [sys.executable, "-m", "granian", "--interface", "rsgi", "--workers", str(workers), "--http", "1",
            "--no-ws", "--host", host, "--port", str(port), "--ssl-certificate", str(cert), "--ssl-keyfile",
            str(key), "--ssl-protocol-min", "tls1.2", "--log-level", "warning", *target]


def routed() -> App:
    """The floor app answering each path of `$FLOOR_ROUTES` with that path's patch (or none), any other path
    with 404."""
    answers = {path: None if patch is None else base64.b64encode(json.dumps(patch).encode()).decode()
               for path, patch in json.loads(Path(os.environ["FLOOR_ROUTES"]).read_bytes()).items()}

    async def routed_app(scope: Any, protocol: Any) -> None:
        if scope.path not in answers:
            protocol.response_bytes(404, [("content-type", "text/plain")], b"no such route\n")
            return
        body = await protocol()
        review = json.loads(body or b"{}")
        request = review.get("request") or {} if isinstance(review, dict) else {}
        response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
        patch = answers[scope.path]
        if patch is not None:
            response.update(patchType="JSONPatch", patch=patch)
        answer = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                             "response": response}).encode()
        protocol.response_bytes(200, [("content-type", "application/json")], answer)

    return routed_app


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
