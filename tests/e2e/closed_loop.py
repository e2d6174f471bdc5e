"""A closed-loop client for fault tests: keep-alive connections that each send the next admission as soon
as the previous one is answered, recording every outcome while the test breaks things on the server.

It reuses connections the way the API server's Go HTTP client does: an idle connection the server has
closed (the peer's FIN is waiting on the socket) is noticed before the next request and replaced, without
counting a failure; a request sent on a connection that then breaks, or answered with anything but 200, is a
failure, and so is a new connection that fails before the request is sent (`Outcome.connecting`).
`reconnect_every` closes each connection after that many requests, so new TLS handshakes keep
happening throughout (the certificate rotation test needs them).
"""

import http.client
import json
import select
import ssl
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Outcome:
    at: float
    """time.monotonic() when the answer (or the error) came."""
    status: int | None
    error: str | None
    signature: Hashable
    """What `inspect` made of the answer: which policy set it reflects, for instance."""
    connecting: bool = False
    """The failure came while opening a new connection (TCP or TLS), before a byte of the request was sent."""
    fresh: bool = False
    """The request was the first on its connection."""


@dataclass
class ClosedLoopClient:
    url: str
    ca: Path
    body: dict[str, Any]
    connections: int = 4
    reconnect_every: int | None = None
    inspect: Callable[[dict[str, Any]], Hashable] = lambda review: None
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> "ClosedLoopClient":
        context = ssl.create_default_context(cafile=str(self.ca))
        payload = json.dumps(self.body).encode()
        for index in range(self.connections):
            thread = threading.Thread(target=self._loop, args=(context, payload), name=f"closed-loop-{index}")
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    @property
    def failures(self) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if o.status != 200]

    def answered(self) -> int:
        with self._lock:
            return sum(1 for o in self.outcomes if o.status == 200)

    def signatures(self, since: float = 0.0) -> set[Hashable]:
        with self._lock:
            return {o.signature for o in self.outcomes if o.status == 200 and o.at >= since}

    def wait_for_answers(self, count: int, timeout: float = 30.0) -> None:
        """Block until `count` more requests have been answered: the load is really running."""
        target = self.answered() + count
        deadline = time.monotonic() + timeout
        while self.answered() < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.answered()} answers; failures: {self.failures[-5:]}")
            time.sleep(0.02)

    def _loop(self, context: ssl.SSLContext, payload: bytes) -> None:
        parts = urlsplit(self.url)
        connection: http.client.HTTPSConnection | None = None
        sent_on_connection = 0
        while not self._stop.is_set():
            if connection is not None and (_closed_by_peer(connection) or sent_on_connection == self.reconnect_every):
                connection.close()
                connection = None
            if connection is None:
                connection = http.client.HTTPSConnection(parts.hostname or "127.0.0.1", parts.port, context=context,
                                                         timeout=15)
                sent_on_connection = 0
            sent_on_connection += 1
            if connection.sock is None:
                try:
                    connection.connect()
                except (OSError, http.client.HTTPException) as error:
                    with self._lock:
                        self.outcomes.append(Outcome(time.monotonic(), None, repr(error), None, connecting=True))
                    connection.close()
                    connection = None
                    continue
            try:
                connection.request("POST", "/mutate?timeout=10s", body=payload,
                                   headers={"Content-Type": "application/json"})
                reply = connection.getresponse()
                raw = reply.read()
                signature = self.inspect(json.loads(raw)) if reply.status == 200 else None
                outcome = Outcome(time.monotonic(), reply.status, None if reply.status == 200 else raw[:200].decode(
                    errors="replace"), signature, fresh=sent_on_connection == 1)
                if reply.will_close:
                    connection.close()
                    connection = None
            except (OSError, http.client.HTTPException, ValueError) as error:
                outcome = Outcome(time.monotonic(), None, repr(error), None, fresh=sent_on_connection == 1)
                connection.close()
                connection = None
            with self._lock:
                self.outcomes.append(outcome)
        if connection is not None:
            connection.close()


def _closed_by_peer(connection: http.client.HTTPSConnection) -> bool:
    """An idle keep-alive connection is readable only if the server closed it (or sent close_notify)."""
    sock = connection.sock
    if sock is None:
        return True
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)
