"""A small, typed HTTP client for the few API-server calls Placer makes, over urllib3.

Every failure surfaces as one of two exceptions: `ApiError` when the API server answered with an error
`Status` (kept whole: code, reason, message, Retry-After), `TransportError` when it could not be reached or
the connection broke. No retries happen here; the callers decide (the reflector backs off, the status
writer tries again later).
"""

import json
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error

from webhook import __version__
from webhook.cluster.client.connection import ClusterConnection, connect
from webhook.cluster.client.watch_stream import (
    ChunkedStreamError,
    PacedBody,
    RawBodyPool,
    Skip,
    chunked_lines,
    raw_body,
)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
_LINE_LIMIT = 16 * 1024 * 1024


class ApiError(Exception):
    """The API server refused a request; `status` is its `Status` object (or one built from the HTTP status)."""

    def __init__(self, code: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def from_status(cls, status: Mapping[str, Any], *, default_code: int = 500) -> "ApiError":
        code = status.get("code")
        return cls(
            code if isinstance(code, int) else default_code,
            str(status.get("reason") or "Unknown"),
            str(status.get("message") or ""),
        )


class TransportError(Exception):
    """The API server could not be reached, or the connection broke mid-response."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = 5.0
    read: float = 30.0
    watch_idle: float = 120.0
    """How long a watch may stay silent before the connection is presumed dead (bookmarks come ~every minute)."""


class KubeApi:
    def __init__(self, connection: ClusterConnection, *, timeouts: Timeouts = Timeouts()) -> None:
        self._connection = connection
        self._timeouts = timeouts
        pool_options: dict[str, Any] = {"num_pools": 2, "maxsize": 16, "retries": False}
        if connection.server.startswith("https"):
            pool_options["ssl_context"] = _ssl_context(connection)
            if connection.tls_server_name:
                pool_options["server_hostname"] = connection.tls_server_name
            if not connection.verify:
                pool_options["cert_reqs"] = ssl.CERT_NONE
        self._pool = urllib3.PoolManager(**pool_options)
        self._pool.pool_classes_by_scheme = {**self._pool.pool_classes_by_scheme, "https": RawBodyPool}
        self._closed = False

    def get(self, path: str, query: Mapping[str, str] | None = None, *, timeout: float | None = None) -> dict[str, Any]:
        """GET one object or list; `timeout` (seconds, connect and read) overrides the client's for this call."""
        return self._request("GET", path, query, timeout=timeout)

    def get_text(self, path: str) -> str:
        """GET a plain-text document: the API server's `/metrics` (Prometheus text format)."""
        response = self._send("GET", path, query=None, read_timeout=self._timeouts.read, accept="text/plain")
        return bytes(response.data or b"").decode(errors="replace")

    def create(self, path: str, body: Mapping[str, Any], query: Mapping[str, str] | None = None) -> dict[str, Any]:
        return self._request("POST", path, query, body)

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._request("PUT", path, None, body)

    def merge_patch(self, path: str, body: Mapping[str, Any], query: Mapping[str, str] | None = None) -> dict[str, Any]:
        return self._request("PATCH", path, query, body, content_type=MERGE_PATCH)

    def delete(self, path: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """DELETE, with `options` (a DeleteOptions: preconditions, propagationPolicy) as the body when given."""
        return self._request("DELETE", path, None, options)

    def watch_lines(
        self, path: str, query: Mapping[str, str], *, pace: float = 0.0, skip: Skip | None = None
    ) -> Iterator[bytes]:
        """The lines (events, one JSON object each, see `decode_event`) of a watch stream until the server ends
        it; raw, so that a caller can tell some apart before decoding. A stream that breaks mid-line, or stays
        silent longer than `watch_idle`, raises TransportError.

        A chunked stream (what the API server sends) is read from the socket in blocks (`watch_stream`);
        anything else through urllib3. `pace` > 0: when no event is waiting, wait that long before reading,
        so that a busy stream is read in bursts (events arrive up to `pace` seconds late). `skip(buffer, start,
        end)`: True for an event that can be dropped undecoded; after events were dropped an empty line comes
        (see `chunked_lines`).
        """
        response = self._send("GET", path, query=query, read_timeout=self._timeouts.watch_idle, stream=True)
        ended_cleanly = False
        try:
            raw = raw_body(response)
            if raw is not None:
                # Read past urllib3: the connection is closed afterwards, never returned to the pool.
                body, sock = raw
                paced = pace > 0 and sock is not None and sock.gettimeout() is not None
                yield from chunked_lines(PacedBody(body, sock, pace) if paced else body, _LINE_LIMIT, skip)
                return
            buffered = b""
            for chunk in response.stream(64 * 1024):
                buffered += chunk
                *lines, buffered = buffered.split(b"\n")
                if len(buffered) > _LINE_LIMIT:
                    raise TransportError("watch event larger than 16 MiB")
                for line in lines:
                    if not line.strip():
                        continue
                    yield b"" if skip is not None and skip(line, 0, len(line)) else line
            if buffered.strip():
                raise TransportError("watch stream ended in the middle of an event")
            ended_cleanly = True
        except ChunkedStreamError as error:
            raise TransportError(f"watch {path}: {error}") from None
        except (Urllib3Error, OSError) as error:
            raise TransportError(f"watch {path}: {error}") from None
        finally:
            if not ended_cleanly:
                # Abandoned, broken mid-stream or read past urllib3: the connection cannot serve another
                # request; returned to the pool it would outlive close() unclosed.
                response.close()
            response.release_conn()

    def close(self) -> None:
        """Close every connection; later requests fail with TransportError instead of opening new ones (a
        thread still finishing its last call must not leave a connection behind that nobody closes)."""
        self._closed = True
        self._pool.clear()

    def _request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        response = self._send(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            read_timeout=timeout if timeout is not None else self._timeouts.read,
            connect_timeout=timeout,
        )
        try:
            return _decode(response.data)
        except TransportError as error:
            raise TransportError(f"{method} {path}: {error}") from None

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None,
        read_timeout: float,
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        stream: bool = False,
        connect_timeout: float | None = None,
        accept: str = JSON,
    ) -> Any:
        if self._closed:
            raise TransportError(f"{method} {path}: the client is closed")
        connect = self._timeouts.connect
        url = self._connection.server + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": accept, "User-Agent": f"placer/{__version__}"}
        token = self._connection.authorization()
        if token:
            headers["Authorization"] = token
        payload = None
        if body is not None:
            headers["Content-Type"] = content_type
            payload = json.dumps(body).encode()
        try:
            response = self._pool.request(
                method,
                url,
                body=payload,
                headers=headers,
                preload_content=not stream,
                timeout=urllib3.Timeout(connect=min(connect_timeout or connect, connect), read=read_timeout),
            )
        except Urllib3Error as error:
            raise TransportError(f"{method} {path}: {error}") from None
        if response.status >= 400:
            raise _api_error(response)
        return response


def _api_error(response: Any) -> ApiError:
    """The `Status` the API server sent, or one made from the HTTP status line when the body is not a Status."""
    data = response.data if response.data is not None else b""
    response.release_conn()
    retry = response.headers.get("Retry-After")
    try:
        status = json.loads(data)
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("kind") == "Status":
        error = ApiError.from_status(status, default_code=response.status)
    else:
        error = ApiError(response.status, response.reason or "Error", data[:200].decode(errors="replace"))
    error.retry_after = float(retry) if retry and retry.isdigit() else None
    return error


def decode_event(line: bytes) -> dict[str, Any]:
    """One watch event (a JSON object); TransportError when it is not one."""
    return _decode(line)


def _decode(data: bytes) -> dict[str, Any]:
    """orjson (several times faster on the watch streams of large collections), else the standard decoder for
    what orjson refuses (integers beyond 64 bits)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            value = json.loads(data)
        except ValueError as error:
            raise TransportError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise TransportError("expected a JSON object")
    return value


def _ssl_context(connection: ClusterConnection) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=connection.ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if connection.cert_file and connection.key_file:
        context.load_cert_chain(connection.cert_file, connection.key_file)
    if not connection.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def api_from_flags(kubeconfig: str | None, context: str | None) -> KubeApi:
    """The API server a command's `--kubeconfig` and `--context` name (without them: `$KUBECONFIG`,
    `~/.kube/config` or in-cluster, as `connection.connect` finds it); ConnectionSetupError when none is."""
    return KubeApi(connect(Path(kubeconfig) if kubeconfig else None, context=context))
