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
(a replacement has begun), the main process (`RespawnWatch`) asks the worker about to be stopped to drain
(SIGUSR1): each of its responses closes its connection, and its clients move to new connections, which the
other workers accept as well. granian replaces workers one at a time, the oldest first on SIGHUP and past
their lifetime, or the one over its memory limit: that is the one chosen. Once the replacement is over, a
drained worker that is still there (a wrong guess) is told to keep connections alive again (SIGUSR2).
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
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

DRAIN = signal.SIGUSR1
"""Sent to a worker: close each connection after its next response."""
RESUME = signal.SIGUSR2
"""Sent to a worker: keep connections alive again."""
POLL_SECONDS = 0.05
"""How often the main process looks at its workers: a replacement waits `respawn_interval` (3.5 s) before it
stops the old worker, so the old one drains for nearly all of that."""


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


def child_processes(pid: int | None = None) -> set[int]:
    """The live children of process `pid` (this one by default): from every thread's `children` list (proc(5),
    `/proc/[pid]/task/[tid]/children`), or, on a kernel built without it (CONFIG_PROC_CHILDREN), from the
    parent field of every process's `stat` (a container's PID namespace shows only its own few)."""
    pid = os.getpid() if pid is None else pid
    children: set[int] = set()
    listed = False
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children.update(int(child) for child in (task / "children").read_text().split())
            listed = True
        except OSError:
            continue  # the thread has ended, or the kernel has no such list
    return children if listed else children_by_parent(pid)


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


def started_at(pid: int) -> int:
    """When process `pid` started, in clock ticks since boot (proc(5), `/proc/[pid]/stat` field 22)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def resident_mib(pid: int) -> float:
    """Process `pid`'s resident memory (proc(5), `/proc/[pid]/statm` field 2, in pages)."""
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class RespawnWatch:
    """In the main process: when there are more workers than configured (granian has started a replacement),
    the worker it will stop drains; when the count is back, a drained worker still there resumes."""

    def __init__(self, workers: int, *, max_rss_mib: int | None = None, others: Callable[[], set[int]] = set,
                 children: Callable[[], set[int]] = child_processes,
                 started: Callable[[int], int] = started_at, rss: Callable[[int], float] = resident_mib,
                 send: Callable[[int, signal.Signals], None] = os.kill) -> None:
        """`others`: children that are not granian's workers (the cluster controller)."""
        self.workers = workers
        self.max_rss_mib = max_rss_mib
        self.others = others
        self.children = children
        self.started = started
        self.rss = rss
        self.send = send
        self.known: set[int] = set()
        """The workers seen at the last look."""
        self.draining: set[int] = set()
        """The workers told to drain during the replacement going on, if any."""
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
        current = self.children() - self.others()
        if len(current) > self.workers:  # a new worker beside the old: the old ones are stopped next
            replaced = self._replaced(self.known & current)
            if replaced is not None and replaced not in self.draining:
                self.draining.add(replaced)
                self._signal(replaced, DRAIN)
        elif self.draining:
            for pid in sorted(self.draining & current):
                self._signal(pid, RESUME)
            self.draining = set()
        self.known = current

    def _replaced(self, candidates: set[int]) -> int | None:
        """The worker granian stops next: one over the memory limit, else the oldest."""
        try:
            if self.max_rss_mib is not None:
                over = [pid for pid in candidates if self.rss(pid) > self.max_rss_mib]
                if over:
                    return min(over, key=self.started)
            return min(candidates, key=self.started) if candidates else None
        except (OSError, ValueError, IndexError):
            return None  # one has just exited: look again in a moment

    def _signal(self, pid: int, which: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has just exited
            self.send(pid, which)
