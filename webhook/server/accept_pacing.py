"""Which worker takes a new connection: the one with the fewest connections per thread, not the first awake.

Every worker waits on the same listening socket, and the first whose main thread wakes accepts. When a
client opens its connections together (the API server after a restart, a load test), one worker often takes
most of them: measured with 2 workers of 4 threads and 8 connections, 7 and 1 in a third of the runs. The
kept-alive connections then stay there for their lifetime, and one worker's core does the work of two
while the other idles (-30 % admissions a second at the same CPU).

So a worker that already has a connection per thread lets a new one wait a little before accepting it, the
longer the more connections it has: a worker with spare threads, which accepts at once, takes it first.
When every worker is as loaded, the least loaded accepts first. The wait only delays a connection's setup
(at most `MAX_DEFER`), never a request on a connection already open, and nothing is refused: the kernel
keeps the connection in the listening socket's queue meanwhile.
"""

import time
from collections.abc import Callable

DEFER_PER_LOAD = 0.05
"""Seconds a worker lets a new connection wait per full set of connections it has (one per thread)."""
MAX_DEFER = 0.25
DEFERRED_ACCEPT_WINDOW = 0.005
"""After a deferral ends, a readiness within this long is the deferred connection's: accepted at once."""


class AcceptPacing:
    """One worker's decision, per wake-up of its listening socket, to accept now or let others go first."""

    def __init__(self, threads: int, *, enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        """`enabled`: whether there are other workers to leave a connection to."""
        self.threads = max(threads, 1)
        self.enabled = enabled
        self._clock = clock
        self._until: float | None = None
        """While a deferral runs: when it ends."""
        self._ended: float | None = None
        """When the last deferral ended."""

    def defer(self, connections: int) -> bool:
        """Whether to leave the waiting connection to another worker for now (the listener then stops
        waking this one until `resume` says so)."""
        if not self.enabled:
            return False
        now = self._clock()
        if self._ended is not None and now - self._ended <= DEFERRED_ACCEPT_WINDOW:
            self._ended = None
            return False  # the connection deferred before, still there: take it
        delay = min(DEFER_PER_LOAD * (connections // self.threads), MAX_DEFER)
        if delay <= 0:
            return False
        self._until = now + delay
        return True

    def resume(self) -> bool:
        """Whether the listener may wake this worker again (no deferral, or it has ended)."""
        if self._until is None:
            return True
        if self._clock() < self._until:
            return False
        self._until, self._ended = None, self._clock()
        return True

    def wait_at_most(self, timeout: float) -> float:
        """The event wait's timeout, cut so that a deferral ends on time."""
        if self._until is None:
            return timeout
        return max(0.0, min(timeout, self._until - self._clock()))
