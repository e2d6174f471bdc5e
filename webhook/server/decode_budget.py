"""A memory budget for decoding request bodies, so that no body, and no burst of bodies, can exhaust a worker.

Python's JSON decoder needs far more memory than the bytes it reads: about 21 bytes per byte for a body of
empty lists (`[[],[],...]`), 28 for one of small maps. Eight concurrent 8 MiB bodies of that shape cost
1.5 GiB across two workers, three times the container's limit, and the heap stays large afterwards. The
body-size limit alone cannot prevent that; what the decoder will allocate can be estimated from the bytes
before decoding, cheaply (`bytes.count` runs at memory speed):

- a body whose estimate exceeds what any request from the API server can need is refused outright (413);
- large bodies reserve their estimate from a per-worker budget, and wait (within the request's deadline) for
  others to finish when it is spent: a worker decodes one request at a time today (its event loop runs the
  engine), so this only matters if that changes; small bodies, nearly all of them, never touch the lock;
- after a large decode the C heap is trimmed, so the worker's RSS returns to its size before.

The largest object the API server stores is 1.5 MiB (etcd's limit), and an AdmissionReview carries at most
the object and its old version: for ordinary objects their cost stays under the limit. A pathologically
dense one is refused with 413, which the API server treats as a webhook failure (`failurePolicy`).
"""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from webhook.server.c_heap import heap_trimmer

MIB = 1024 * 1024
_PER_MAP = 128
_PER_LIST = 64
_PER_VALUE = 48
_PER_BYTE = 2
_MOST_PER_BYTE = max(_PER_MAP, _PER_LIST, _PER_VALUE) + _PER_BYTE
"""The estimate of a body made of nothing but the costliest byte: no body's estimate exceeds its length times
this, so a body whose bound is small is never counted (three scans of an 8.5 KB body take 9 µs)."""
COST_FACTOR = 5
"""What a decoded request costs in all, per byte of its decode estimate: the decoded value, and the copies
CEL makes of `object` and `pod` for each pass of the rules (measured: one copy is about one decode)."""


class DecodeRefused(Exception):
    """The body cannot be decoded within the budget; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def estimate(body: bytes) -> int:
    """An upper estimate of the bytes `json.loads(body)` allocates (measured per container and value)."""
    return (
        _PER_MAP * body.count(b"{")
        + _PER_LIST * body.count(b"[")
        + _PER_VALUE * body.count(b",")
        + _PER_BYTE * len(body)
    )


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    worker_total: int = 120 * MIB
    """What the large requests being served at once in one worker may cost together; also the most one
    request may cost (a decode estimate of 24 MiB: a 3 MiB body of ordinary objects needs about 21)."""
    small: int = 8 * MIB
    """Requests costing less are served without reserving anything."""
    trim_after: int = 32 * MIB
    """Return freed memory to the operating system after decoding a body estimated above this."""


class DecodeBudget:
    """One per worker: admits large decodes while their estimates fit, in arrival order of wake-ups."""

    def __init__(self, limits: BudgetLimits = BudgetLimits(), *, monotonic: Callable[[], float] = time.monotonic):
        self.limits = limits
        self._monotonic = monotonic
        self._in_use = 0
        self._condition = threading.Condition()
        self._trim = heap_trimmer()

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def small_below(self) -> int:
        """The length under which a body is small whatever it holds (`is_small`)."""
        return -(-min(self.limits.small, self.limits.worker_total) // (_MOST_PER_BYTE * COST_FACTOR))

    def is_small(self, body: bytes) -> bool:
        """Small whatever it holds: nearly every request (any under 12 KB) needs no reservation."""
        return len(body) < self.small_below

    @contextmanager
    def reserve(self, body: bytes, deadline: float | None) -> Iterator[None]:
        """Hold the body's share of the budget while it is decoded and used; DecodeRefused if it cannot."""
        if self.is_small(body):
            yield
            return
        cost = estimate(body) * COST_FACTOR
        if cost > self.limits.worker_total:
            self._trim()  # what reading the body took (granian's buffers, the bytes) goes back at once
            raise DecodeRefused(
                413,
                f"request would need about {cost // MIB} MiB of memory (limit {self.limits.worker_total // MIB} MiB):"
                " no AdmissionReview of a workload is that dense",
            )
        if cost < self.limits.small:
            yield
            return
        self._acquire(cost, deadline)
        try:
            yield
        finally:
            with self._condition:
                self._in_use -= cost
                self._condition.notify_all()
            if cost >= self.limits.trim_after:
                self._trim()

    def _acquire(self, cost: int, deadline: float | None) -> None:
        give_up = deadline if deadline is not None else self._monotonic() + 5.0
        with self._condition:
            while self._in_use + cost > self.limits.worker_total:
                remaining = give_up - self._monotonic()
                if remaining <= 0:
                    raise DecodeRefused(503, "too many large requests being decoded at once; try again")
                self._condition.wait(remaining)
            self._in_use += cost
