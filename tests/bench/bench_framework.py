"""What a web framework would add to each review: Flask's route against a plain callable, in process.

    python -m tests.bench.bench_framework [--requests 20000]

Both read a 3.1 KB body and return 100 bytes; neither does any of Placer's work. Flask's request and response
objects, routing and context locals are the difference: why the review endpoints are a plain RSGI callable
(webhook/server/app.py) and not a Flask route. (Flask is WSGI: under granian's RSGI it would also need a
bridge that reads the body first.)
"""

import argparse
import io
import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, Response, request

BODY = b"x" * 3100


def _environ() -> dict[str, Any]:
    return {"REQUEST_METHOD": "POST", "PATH_INFO": "/mutate", "QUERY_STRING": "timeout=10s", "SERVER_NAME": "placer",
            "SERVER_PORT": "8443", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "https",
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(BODY)), "wsgi.input": io.BytesIO(BODY)}


def flask_app() -> Callable[..., Iterable[bytes]]:
    app = Flask("framework-bench")

    @app.post("/mutate")
    def mutate() -> Response:
        return Response(request.get_data()[:100], mimetype="application/json")

    return app.wsgi_app


def plain_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    data = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"]))
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "100")])
    return [data[:100]]


def per_request_us(app: Callable[..., Iterable[bytes]], requests: int) -> float:
    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        return None

    for _ in range(requests // 10):
        b"".join(app(_environ(), start_response))
    started = time.perf_counter()
    for _ in range(requests):
        b"".join(app(_environ(), start_response))
    return (time.perf_counter() - started) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    flask, plain = per_request_us(flask_app(), args.requests), per_request_us(plain_app, args.requests)
    print(f"Flask route {flask:.1f} µs, plain callable {plain:.1f} µs: Flask adds {flask - plain:.1f} µs a request")


if __name__ == "__main__":
    main()
