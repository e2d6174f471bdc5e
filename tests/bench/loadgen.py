"""A closed-loop HTTPS load generator, run as its own process: keep-alive connections, one request in flight each.

    python -m tests.bench.loadgen --url https://127.0.0.1:8443/mutate --body review.json \\
        --connections 32 --duration 10 --ca ca.crt

Each connection is an asyncio task on one TLS connection that sends the same pre-encoded request, reads the
response (status line, headers, Content-Length body) and records the latency; new connections are opened
only when the server closes one. Prints one JSON object: requests, errors (and by kind: an HTTP status or
an exception), seconds, rps and latency percentiles in ms. `--processes N` splits the connections over N
processes (the generator must not be the bottleneck); their samples are merged before the percentiles are
computed.

Debian's `wrk` is not installable here (no root, no apt), and PyPI has no C load generator; this stays out
of the server's process, so the server is measured as the API server sees it.
"""

import argparse
import asyncio
import json
import multiprocessing
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Client:
    """How to reach the server: the CA that signed it (none: not verified), a client certificate, a TLS server
    name other than the URL's host, and headers sent with every request (an API server's bearer token)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca) if self.ca else ssl._create_unverified_context()
        if self.cert:
            context.load_cert_chain(self.cert, self.key)
        return context


def build_request(url: str, body: bytes | None, headers: tuple[tuple[str, str], ...] = ()) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    method = "POST" if body is not None else "GET"
    head = f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: keep-alive\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers)
    return str(parts.hostname), int(parts.port or 443), (head + "\r\n").encode() + (body or b"")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """The status, and whether the server closes the connection after this response (`Connection: close`,
    which a worker being replaced sends): the next request then goes on a new connection, as any HTTP client
    (the API server's Go transport included) does."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed")
    status = int(status_line.split()[1])
    length = 0
    closing = chunked = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.partition(b":")
        header = name.strip().lower()
        if header == b"content-length":
            length = int(value.strip())
        elif header == b"connection" and value.strip().lower() == b"close":
            closing = True
        elif header == b"transfer-encoding" and value.strip().lower().endswith(b"chunked"):
            chunked = True
    if chunked:
        await _read_chunks(reader)
    elif length:
        await reader.readexactly(length)
    return status, closing


async def _read_chunks(reader: asyncio.StreamReader) -> None:
    """A chunked body (RFC 9112, section 7.1): chunks of a hex size (extensions after `;` ignored) until the
    last, of size 0, then trailer fields up to an empty line. Go's HTTP server (the API server's) sends one
    whenever a handler writes more than `bufferBeforeChunkingSize` (2048 bytes, net/http/server.go) without a
    Content-Length: a created Pod of a few KiB comes back so."""
    while True:
        size = int((await reader.readline()).split(b";")[0].strip(), 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            return
        await reader.readexactly(size + 2)  # the chunk and its CRLF


async def _connection(host: str, port: int, requests: list[bytes], context: ssl.SSLContext,
                      server_name: str | None, until: float, limit: int | None, latencies: list[float],
                      counters: dict[str, int]) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    while time.monotonic() < until and (limit is None or counters["sent"] < limit):
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port, ssl=context,
                                                               server_hostname=server_name or host)
            assert reader is not None
            request = requests[counters["sent"] % len(requests)]  # the process's requests in turn
            counters["sent"] += 1
            started = time.perf_counter()
            writer.write(request)
            await writer.drain()
            status, closing = await _read_response(reader)
            latencies.append((time.perf_counter() - started) * 1000)
            if not 200 <= status < 300:  # 201 for a create
                counters["errors"] += 1
                counters[f"HTTP {status}"] = counters.get(f"HTTP {status}", 0) + 1
            if closing:
                writer.close()
                reader = writer = None
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError) as error:
            counters["errors"] += 1
            counters[type(error).__name__] = counters.get(type(error).__name__, 0) + 1
            if writer is not None:
                writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


async def _run(url: str, bodies: list[bytes] | None, connections: int, duration: float, limit: int | None,
               client: Client) -> tuple[list[float], dict[str, int], float]:
    built = [build_request(url, body, client.headers) for body in (bodies or [None])]
    host, port = built[0][0], built[0][1]
    requests = [request for _, _, request in built]
    context = client.context()
    latencies: list[float] = []
    counters = {"sent": 0, "errors": 0}
    started = time.monotonic()
    until = started + duration
    await asyncio.gather(*(
        _connection(host, port, requests, context, client.server_name, until, limit, latencies, counters)
        for _ in range(connections)))
    return latencies, counters, time.monotonic() - started


Job = tuple[str, list[bytes] | None, int, float, int | None, Client]
Outcome = tuple[list[float], dict[str, int], float]


def _worker(args: Job) -> Outcome:
    return asyncio.run(_run(*args))


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else float("nan")


def load(url: str, body: bytes | list[bytes] | None, *, connections: int, duration: float, ca: str | None = None,
         processes: int = 1, limit: int | None = None, client: Client | None = None) -> dict[str, Any]:
    """Run the load (in `processes` child processes) and return the summary. `body`: one request body, or
    several sent in turn (each process its own share of them: a stream of sibling Pods, say). `client`, when
    given, is how to reach the server (`ca` is then ignored)."""
    processes = max(1, min(processes, connections))
    shares = [connections // processes + (1 if i < connections % processes else 0) for i in range(processes)]
    per_limit = None if limit is None else -(-limit // processes)
    reach = client or Client(ca=ca)
    bodies = None if body is None else [body] if isinstance(body, bytes) else body
    jobs: list[Job] = [(url, bodies if bodies is None or len(bodies) < processes else bodies[index::processes],
                        share, duration, per_limit, reach) for index, share in enumerate(shares)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        results = pool.map(_worker, jobs)
    latencies = [value for result in results for value in result[0]]
    errors = sum(result[1]["errors"] for result in results)
    kinds: dict[str, int] = {}
    for _, counters, _ in results:
        for kind, count in counters.items():
            if kind not in ("sent", "errors"):
                kinds[kind] = kinds.get(kind, 0) + count
    seconds = max(result[2] for result in results)
    return {
        "connections": connections,
        "requests": len(latencies),
        "errors": errors,
        "error_kinds": kinds,
        "seconds": round(seconds, 2),
        "rps": round(len(latencies) / seconds, 1) if seconds else 0.0,
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "p999_ms": round(percentile(latencies, 0.999), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--body", type=Path, help="request body file (POST); none for GET")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=None, help="stop after this many requests")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--ca", default=None)
    args = parser.parse_args(argv)
    body = args.body.read_bytes() if args.body else None
    summary = load(args.url, body, connections=args.connections, duration=args.duration, ca=args.ca,
                   processes=args.processes, limit=args.requests)
    json.dump(summary, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
