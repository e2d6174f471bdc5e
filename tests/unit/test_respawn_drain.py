"""The main process tells the worker granian is about to stop to drain, and only that one (respawn_drain)."""

import os
import signal
import subprocess
import sys

from webhook.server.respawn_drain import DRAIN, RESUME, RespawnWatch, child_processes, children_by_parent


class Workers:
    """Children of a fake main process: pid → start time (ticks) and resident MiB."""

    def __init__(self, **started: int) -> None:
        self.started = {int(pid.removeprefix("p")): at for pid, at in started.items()}
        self.rss: dict[int, float] = {}
        self.sent: list[tuple[int, signal.Signals]] = []

    def watch(self, workers: int = 2, *, max_rss_mib: int | None = None, controller: int | None = None
              ) -> RespawnWatch:
        return RespawnWatch(
            workers, max_rss_mib=max_rss_mib, others=lambda: {controller} if controller else set(),
            children=lambda: set(self.started) | ({controller} if controller else set()),
            started=lambda pid: self.started[pid], rss=lambda pid: self.rss.get(pid, 50.0),
            send=lambda pid, which: self.sent.append((pid, which)))


def test_a_reload_drains_each_old_worker_just_before_it_is_stopped_and_never_a_new_one() -> None:
    workers = Workers(p11=100, p12=101)
    watch = workers.watch()
    watch.look()
    assert workers.sent == []  # two workers of two: nothing is being replaced
    workers.started[21] = 500  # SIGHUP: granian starts the first new worker beside the old
    watch.look()
    assert workers.sent == [(11, DRAIN)]  # the oldest is stopped first
    watch.look()
    assert workers.sent == [(11, DRAIN)], "told once"
    del workers.started[11]  # stopped; granian starts the second new one
    workers.started[22] = 900
    watch.look()
    assert workers.sent == [(11, DRAIN), (12, DRAIN)]
    del workers.started[12]
    watch.look()
    assert workers.sent == [(11, DRAIN), (12, DRAIN)], "nothing to resume: both drained workers are gone"
    workers.started[23] = 1200  # a later replacement drains the oldest of the new ones
    watch.look()
    assert workers.sent[-1] == (21, DRAIN)


def test_the_worker_over_its_memory_limit_is_the_one_drained_and_a_wrong_guess_resumes() -> None:
    workers = Workers(p11=100, p12=101)
    workers.rss[12] = 300.0
    watch = workers.watch(max_rss_mib=256)
    watch.look()
    workers.started[21] = 500
    watch.look()
    assert workers.sent == [(12, DRAIN)]
    workers.rss.clear()
    workers.started[22] = 600  # a second replacement of another worker goes on at the same time
    watch.look()
    assert workers.sent == [(12, DRAIN), (11, DRAIN)]
    del workers.started[22], workers.started[21]  # the count is back, and neither drained worker was stopped
    watch.look()
    assert sorted(workers.sent[2:]) == [(11, RESUME), (12, RESUME)]


def test_the_controller_process_is_not_counted_as_a_worker() -> None:
    workers = Workers(p11=100, p12=101)
    watch = workers.watch(controller=99)
    watch.look()
    watch.look()
    assert workers.sent == []


def test_a_worker_that_exits_before_it_is_signalled_is_no_error() -> None:
    def gone(pid: int, which: signal.Signals) -> None:
        raise ProcessLookupError(pid)

    watch = RespawnWatch(1, children=lambda: {1, 2}, started=lambda pid: pid, send=gone)
    watch.known = {1}
    watch.look()
    assert watch.draining == {1}


def test_child_processes_lists_this_process_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in child_processes()
    finally:
        child.kill()
        child.wait()


def test_children_are_found_by_their_parent_field_where_the_kernel_lists_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in children_by_parent(os.getpid())
        assert children_by_parent(os.getpid()) <= child_processes()
    finally:
        child.kill()
        child.wait()
