"""The worker tells the arbiter it is alive once a second, not on every turn of its event loop (each beat is a
file-time update that lets another thread take the GIL), and never falls silent while its loop turns."""

from tests.helpers import Clock
from webhook.server.worker import HEARTBEAT_INTERVAL, Heartbeat


def test_the_first_beat_is_at_once_then_one_per_interval() -> None:
    clock = Clock()
    heartbeat = Heartbeat(HEARTBEAT_INTERVAL, clock=clock)
    beats = []
    for _ in range(192):  # three seconds of a busy loop turning every 1/64 s
        beats.append(heartbeat.due())
        clock.now += 1 / 64
    assert [turn for turn, beat in enumerate(beats) if beat] == [0, 64, 128]


def test_a_loop_that_turns_rarely_beats_every_turn() -> None:
    clock = Clock()
    heartbeat = Heartbeat(HEARTBEAT_INTERVAL, clock=clock)
    for _ in range(5):  # an idle worker's loop wakes once a second
        assert heartbeat.due()
        clock.now += 1.0
