"""The main process tells the worker granian is about to stop to drain, and only that one (respawn_drain)."""

import os
import signal
import subprocess
import sys

from webhook.server.respawn_drain import (
    DRAIN,
    RESUME,
    RespawnWatch,
    children_by_parent,
    main_thread_children,
)


class Workers:
    """Children of a fake main process, and the signals sent to them."""

    def __init__(self, *pids: int) -> None:
        self.pids = set(pids)
        self.now = 100.0
        self.sent: list[tuple[int, signal.Signals]] = []

    def watch(self, workers: int = 2, *, controller: int | None = None) -> RespawnWatch:
        return RespawnWatch(
            workers, interval=6.0, monotonic=lambda: self.now, others=lambda: {controller} if controller else set(),
            children=lambda: set(self.pids) | ({controller} if controller else set()),
            send=lambda pid, which: self.sent.append((pid, which)))


def test_a_reload_drains_every_worker_there_before_each_new_one_and_resumes_those_that_stay() -> None:
    """granian replaces workers by index on SIGHUP, not by age: whichever it stops next has drained."""
    workers = Workers(11, 12)
    watch = workers.watch()
    watch.look()
    assert workers.sent == []  # two workers of two: nothing is being replaced
    workers.pids.add(21)  # SIGHUP: the first new worker beside the old ones
    watch.look()
    assert workers.sent == [(11, DRAIN), (12, DRAIN)]
    watch.look()
    assert workers.sent == [(11, DRAIN), (12, DRAIN)], "told once"
    workers.pids.discard(11)  # one old worker stopped: the other keeps its connections until its turn
    watch.look()
    assert workers.sent[2:] == [(12, RESUME)]
    workers.pids.add(22)  # the second new one: 12 is stopped next (21, new, drains too, then resumes)
    watch.look()
    assert workers.sent[3:] == [(12, DRAIN), (21, DRAIN)]
    workers.pids.discard(12)
    watch.look()
    assert workers.sent[5:] == [(21, RESUME)], "the new workers keep their connections"
    watch.look()
    assert len(workers.sent) == 6


def test_a_stop_and_a_start_within_one_look_still_drain_the_next_one() -> None:
    workers = Workers(11, 12)
    watch = workers.watch()
    watch.look()
    workers.pids.add(21)
    watch.look()
    workers.pids.discard(11)
    workers.pids.add(22)  # granian stopped 11 and started 22 between two looks
    watch.look()
    assert workers.sent == [(11, DRAIN), (12, DRAIN), (21, DRAIN)]
    workers.pids.discard(12)
    watch.look()
    assert workers.sent[3:] == [(21, RESUME)]


def test_a_new_worker_that_dies_leaves_the_old_ones_draining_until_granian_stops_one() -> None:
    """An OOM kill of the fresh worker brings the count back, but granian still stops an old worker when the
    interval is over, then starts the next new one beside the last old one: that one drains too."""
    workers = Workers(11, 12)
    watch = workers.watch()
    watch.look()
    workers.pids.add(21)
    watch.look()
    workers.pids.discard(21)  # killed a moment after it started
    workers.now += 0.5
    watch.look()
    assert workers.sent == [(11, DRAIN), (12, DRAIN)], "the old ones must not keep connections alive yet"
    workers.now += 5.5
    workers.pids.discard(11)  # granian stops worker 1 as planned
    watch.look()
    assert workers.sent[2:] == [(12, RESUME)]
    workers.now += 0.05
    workers.pids.add(22)  # and starts worker 2's replacement at once: two workers, but 12 is stopped next
    watch.look()
    assert workers.sent[3:] == [(12, DRAIN)]
    workers.now += 6.0
    workers.pids.discard(12)
    watch.look()
    assert workers.sent[4:] == [], "22 is new: it never drained"
    assert watch.draining == set()


def test_a_drain_ends_once_the_replacement_has_surely_stopped_its_old_worker() -> None:
    """A worker started to replace one that died just as a replacement ended looks like its next step: its
    neighbour drains, but no longer than a replacement's interval and margin."""
    workers = Workers(11, 12)
    watch = workers.watch()
    watch.look()
    workers.pids.add(21)
    watch.look()
    workers.pids.discard(11)
    watch.look()
    workers.pids.discard(12)  # died meanwhile (not stopped by granian): 21 alone
    workers.now += 0.2
    watch.look()
    workers.pids.add(22)  # granian replaces the dead worker at once
    workers.now += 0.1
    watch.look()
    assert workers.sent == [(11, DRAIN), (12, DRAIN), (12, RESUME), (21, DRAIN)]
    workers.now += 6.0
    watch.look()
    assert workers.sent[4:] == []
    workers.now += 2.1
    watch.look()
    assert workers.sent[4:] == [(21, RESUME)]


def test_a_worker_that_replaces_a_dead_one_outside_a_replacement_drains_no_one() -> None:
    workers = Workers(11, 12)
    watch = workers.watch()
    watch.look()
    workers.pids.discard(11)  # killed
    watch.look()
    workers.pids.add(21)  # granian starts its replacement
    workers.now += 0.1
    watch.look()
    assert workers.sent == []


def test_the_controller_process_is_not_counted_as_a_worker() -> None:
    workers = Workers(11, 12)
    watch = workers.watch(controller=99)
    watch.look()
    watch.look()
    assert workers.sent == []


def test_a_worker_that_exits_before_it_is_signalled_is_no_error() -> None:
    def gone(pid: int, which: signal.Signals) -> None:
        raise ProcessLookupError(pid)

    watch = RespawnWatch(1, interval=6.0, children=lambda: {1, 2}, send=gone)
    watch.known = {1}
    watch.look()
    assert watch.draining == {1}


def test_main_thread_children_lists_what_this_thread_started() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in main_thread_children()
    finally:
        child.kill()
        child.wait()


def test_children_are_found_by_their_parent_field_where_the_kernel_lists_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in children_by_parent(os.getpid())
        assert children_by_parent(os.getpid()) <= main_thread_children()
    finally:
        child.kill()
        child.wait()
