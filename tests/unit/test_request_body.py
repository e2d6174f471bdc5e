"""A body's deadline (webhook.server.request_body): 408 when it does not arrive in time, the body when it does,
and a cancellation from elsewhere (a stopping worker) stays a cancellation, not a 408."""

import asyncio
from collections.abc import AsyncIterator

import pytest

from webhook.server.request_body import BodyRefused, ReadDeadlines, read_body


class Source:
    """A body that arrives after `delay` seconds (all at once, or chunked when iterated)."""

    def __init__(self, body: bytes, delay: float) -> None:
        self.body = body
        self.delay = delay

    async def __call__(self) -> bytes:
        await asyncio.sleep(self.delay)
        return self.body

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        await asyncio.sleep(self.delay)
        yield self.body


@pytest.mark.parametrize("length", ["4", None])
def test_a_body_in_time_is_read_and_a_late_one_is_408(length: str | None) -> None:
    async def run() -> None:
        assert await read_body(Source(b"abcd", 0.0), length, limit=100, timeout=1.0) == b"abcd"
        with pytest.raises(BodyRefused) as refused:
            await read_body(Source(b"abcd", 5.0), length, limit=100, timeout=0.05)
        assert refused.value.status == 408 and "did not arrive within 0.05s" in str(refused.value)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the timer's cancellation was taken back

    asyncio.run(run())


def test_a_cancellation_from_elsewhere_is_not_a_timeout() -> None:
    async def run() -> None:
        reading = asyncio.ensure_future(read_body(Source(b"abcd", 5.0), "4", limit=100, timeout=1.0))
        await asyncio.sleep(0.01)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading

    asyncio.run(run())


def test_reads_sharing_one_timer_are_each_cut_off_at_their_own_deadline() -> None:
    """The application's reads share a `ReadDeadlines`: a late body is 408 at its deadline whatever reads came
    and went before it, one in time is read, and a shorter timeout given after a longer one still comes first."""

    async def run() -> None:
        deadlines = ReadDeadlines()
        loop = asyncio.get_running_loop()

        async def read(delay: float, timeout: float) -> tuple[bytes | int, float]:
            started = loop.time()
            try:
                body: bytes | int = await read_body(Source(b"abcd", delay), "4", limit=100, timeout=timeout,
                                                    deadlines=deadlines)
            except BodyRefused as refused:
                body = refused.status
            return body, loop.time() - started

        assert (await read(0.0, 0.2))[0] == b"abcd"  # the timer armed for it outlives the read
        results = await asyncio.gather(read(5.0, 0.3), read(0.05, 0.3), read(5.0, 0.1), read(0.0, 0.3))
        assert [body for body, _ in results] == [408, b"abcd", 408, b"abcd"]
        assert 0.3 <= results[0][1] < 1.0 and 0.1 <= results[2][1] < 0.3  # each at its own deadline
        late, _ = await read(5.0, 0.1)  # after every earlier read ended: the timer is armed again
        assert late == 408

    asyncio.run(run())
