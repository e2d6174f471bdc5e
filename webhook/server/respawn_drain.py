"""Workers about to be replaced close their kept-alive connections at a safe moment: after a response.

granian replaces a worker (on SIGHUP for a rotated certificate or a changed API server version, past its
lifetime or memory limit, or on a CEL leak budget spent) by starting the new one beside it, waiting
`respawn_interval`, then stopping the old one gracefully. A graceful stop closes the connections that are
idle at that moment, and one of them may be carrying the client's next request already: the API server's
Go client does not resend a POST that was written on a connection the server then closed (net/http
`persistConn.shouldRetryRequest`: only requests that are replayable, or of which nothing was written, are
retried), so that admission fails and the webhook's failurePolicy decides.

A response that says `Connection: close` has no such race: the client reads it, then opens a new
connection for its next request (RFC 9112 section 9.6). So when granian starts a worker beside the others
(a replacement has begun), the main process (`RespawnWatch`) asks every worker that was there before it to
drain (SIGUSR1): each of their responses closes its connection, and their clients move to new connections,
which the new worker accepts as well. Which one granian stops next cannot be told from outside: on SIGHUP
it replaces workers by their index, whatever their age, and two workers started in the same 10 ms tick look
alike; so all of them drain, for the `respawn_interval` (6 s) before the stop. Once one of them has been
stopped and the count is back, those that remain are told to keep connections alive again (SIGUSR2). A new
worker that dies before then (an OOM kill) brings the count back too, but granian still stops an old one
when the interval is over: the old ones keep draining until it has.
What drains in the worker is `WorkerDrain`.

What remains: a connection the stopping worker accepted in the last moment, before its first request
arrived, is still closed as idle (docs/serving.md, "Known limitations").
"""

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

DRAIN = signal.SIGUSR1
"""Sent to a worker: close each connection after its next response."""
RESUME = signal.SIGUSR2
"""Sent to a worker: keep connections alive again."""
POLL_SECONDS = 0.2
"""How often the main process looks at its workers: a replacement waits `respawn_interval` (6 s) before it
stops the old worker, so the old one drains for nearly all of that. Each look is a wake-up and a file read:
at 20 a second (every 50 ms) the thread took 0.5 % of a core on an idle server; at 5, a quarter of it."""
NEXT_STEP_SECONDS = 1.0
"""A worker started this soon after a drained one stopped is the next step of the same replacement: granian
stops the old worker of one step, then at once starts the new worker of the next."""
STOP_MARGIN_SECONDS = 2.0
"""How long past `respawn_interval` after a new worker appeared the old ones keep draining at most: by then
granian has begun stopping the one it replaces (it starts that stop exactly `respawn_interval` after the new
worker's start; this thread sees the start within `POLL_SECONDS`). A worker started to replace one that died
just after a replacement looks like a step of it, and its neighbours drain for no more than that."""


class WorkerDrain:
    """In a worker: whether its responses should close their connections (`draining`), set by signals."""

    def __init__(self) -> None:
        self.draining = False

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take DRAIN and RESUME on the worker's event loop (RSGI's `__rsgi_init__` hands it over)."""
        loop.add_signal_handler(DRAIN, self._set, True)
        loop.add_signal_handler(RESUME, self._set, False)

    def _set(self, draining: bool) -> None:
        if draining != self.draining:
            log.info("worker %d %s", os.getpid(),
                     "drains: it is being replaced, each response closes its connection" if draining
                     else "keeps connections alive again")
        self.draining = draining


def main_thread_children(pid: int | None = None) -> set[int]:
    """The live children process `pid`'s main thread started: granian starts and replaces its workers from
    its main loop, on the main thread. One file read (`/proc/[pid]/task/[pid]/children`, proc(5)), where
    reading every thread's list took 0.8 % of a core at 20 looks a second; on a kernel built without the
    lists (CONFIG_PROC_CHILDREN), the parent field of every process (`children_by_parent`: a container's PID
    namespace shows only its own few)."""
    pid = os.getpid() if pid is None else pid
    try:
        return {int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except FileNotFoundError:
        return children_by_parent(pid) if Path(f"/proc/{pid}").exists() else set()


def children_by_parent(pid: int) -> set[int]:
    children = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # it has just exited
        if parent == pid:
            children.add(int(entry.name))
    return children


class RespawnWatch:
    """In the main process: when granian starts a worker to replace one (more workers than configured, or a
    new one just after a drained one stopped: the next step of a replacement), the workers that were there
    before it drain; once one of those has stopped and the count is back, or once the replacement's interval
    is surely over, those still there resume."""

    def __init__(self, workers: int, *, interval: float, others: Callable[[], set[int]] = set,
                 children: Callable[[], set[int]] = main_thread_children,
                 send: Callable[[int, signal.Signals], None] = os.kill,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`interval`: granian's `respawn_interval`, from a new worker's start to the old one's stop.
        `others`: children that are not granian's workers (the cluster controller)."""
        self.workers = workers
        self.interval = interval
        self.others = others
        self.children = children
        self.send = send
        self.monotonic = monotonic
        self.known: set[int] = set()
        """The workers seen at the last look."""
        self.draining: set[int] = set()
        """The workers told to drain during the replacement going on, if any."""
        self._drain_until = 0.0
        """When the replacement that made them drain has surely stopped its old worker."""
        self._last_stop = float("-inf")
        """When a drained worker was last seen gone."""
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placer-respawn-drain", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(POLL_SECONDS + 1.0)

    def _run(self) -> None:
        while not self._stopping.wait(POLL_SECONDS):
            try:
                self.look()
            except Exception:  # this thread must never end while the server runs
                log.exception("watching worker replacements")

    def look(self) -> None:
        now = self.monotonic()
        current = self.children() - self.others()
        if self.draining - current:
            self._last_stop = now
        # A replacement starts its new worker beside the old ones (more than configured); its next step starts
        # the next one as soon as the previous old one has stopped, which is not more than configured when a new
        # worker of this replacement has died meanwhile (an OOM kill): granian still stops an old one next.
        replacing = len(current) > self.workers or now - self._last_stop < NEXT_STEP_SECONDS
        if replacing and current - self.known and self.known & current:
            self._drain_until = now + self.interval + STOP_MARGIN_SECONDS
            for pid in sorted((self.known & current) - self.draining):  # one of these is stopped next
                self.draining.add(pid)
                self._signal(pid, DRAIN)
        elif self.draining and ((len(current) <= self.workers and self.draining - current)
                                or now >= self._drain_until):  # the replaced one has stopped (or surely has)
            for pid in sorted(self.draining & current):
                self._signal(pid, RESUME)
            self.draining = set()
        self.known = current

    def _signal(self, pid: int, which: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has just exited
            self.send(pid, which)
