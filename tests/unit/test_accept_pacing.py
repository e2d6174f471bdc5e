"""A worker with a connection per thread already lets a new connection go to a less loaded worker first."""

import pytest

from tests.helpers import Clock
from webhook.server.accept_pacing import DEFER_PER_LOAD, MAX_DEFER, AcceptPacing


def test_a_worker_with_spare_threads_accepts_at_once() -> None:
    pacing = AcceptPacing(4, clock=Clock())
    assert [pacing.defer(connections) for connections in range(4)] == [False] * 4
    assert pacing.resume() and pacing.wait_at_most(1.0) == 1.0


def test_a_loaded_worker_waits_longer_the_more_connections_it_has_then_takes_the_connection() -> None:
    clock = Clock()
    pacing = AcceptPacing(4, clock=clock)
    assert pacing.defer(4)
    assert not pacing.resume()  # its listener stays quiet meanwhile: another worker may accept
    assert pacing.wait_at_most(1.0) == pytest.approx(DEFER_PER_LOAD)
    clock.now += DEFER_PER_LOAD
    assert pacing.resume()
    assert not pacing.defer(4)  # still waiting just after the deferral: nobody took it, this worker does
    clock.now += 1.0
    assert pacing.defer(9)  # a later connection is deferred again, twice as long
    assert pacing.wait_at_most(1.0) == pytest.approx(2 * DEFER_PER_LOAD)
    clock.now += 2 * DEFER_PER_LOAD
    assert pacing.resume()


def test_the_wait_is_bounded_and_a_lone_worker_never_waits() -> None:
    clock = Clock()
    pacing = AcceptPacing(1, clock=clock)
    assert pacing.defer(1000) and pacing.wait_at_most(10.0) == pytest.approx(MAX_DEFER)
    alone = AcceptPacing(4, enabled=False, clock=clock)
    assert not alone.defer(1000) and alone.resume()
