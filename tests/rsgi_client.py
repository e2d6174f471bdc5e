"""Requests to Placer's application in process, as granian's RSGI interface hands them to it.

A scope and a protocol object with the same attributes and calls as granian's (`granian.rsgi`): the
application under test is the one the workers run; only the network and granian's Rust side are left out
(tests/e2e has them).
"""

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any


class Headers(dict[str, str]):
    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)


@dataclass
class Scope:
    method: str
    path: str
    query_string: str
    headers: Headers
    proto: str = "http"
    http_version: str = "1.1"


@dataclass
class Protocol:
    body: bytes
    chunk: int = 65536
    status: int | None = None
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    response_body: bytes = b""
    iterated: bool = False

    async def __call__(self) -> bytes:
        return self.body

    def __aiter__(self) -> AsyncIterator[bytes]:
        assert not self.iterated, "granian's body can be iterated once (RSGIProtocolError)"
        self.iterated = True
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), self.chunk):
            yield self.body[start:start + self.chunk]

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        assert self.status is None, "one response per request"
        self.status, self.response_headers, self.response_body = status, headers, body


@dataclass
class Response:
    status_code: int
    headers: dict[str, str]
    data: bytes

    def get_json(self) -> Any:
        return json.loads(self.data)

    def get_data(self) -> bytes:
        return self.data

    @property
    def text(self) -> str:
        return self.data.decode()


class AppClient:
    """`client.post("/mutate", json=...)`: one request through the application, its response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def request(self, method: str, url: str, *, data: bytes | str = b"", json_body: Any = None,
                content_type: str | None = None, chunked: bool = False) -> Response:
        path, _, query = url.partition("?")
        if json_body is not None:
            data, content_type = json.dumps(json_body), content_type or "application/json"
        body = data.encode() if isinstance(data, str) else data
        headers = Headers()
        if content_type is not None:
            headers["content-type"] = content_type
        if method in ("POST", "PUT") and not chunked:
            headers["content-length"] = str(len(body))
        protocol = Protocol(body)
        asyncio.run(self.app(Scope(method, path, query, headers), protocol))
        assert protocol.status is not None, "the application answered nothing"
        return Response(protocol.status, dict(protocol.response_headers), protocol.response_body)

    def get(self, url: str) -> Response:
        return self.request("GET", url)

    def post(self, url: str, *, json: Any = None, data: bytes | str = b"", content_type: str | None = None,
             chunked: bool = False) -> Response:
        return self.request("POST", url, data=data, json_body=json, content_type=content_type, chunked=chunked)
