"""A request body read in full, within its size limit and its deadline, without a thread waiting on the client.

granian hands the application a request once its head has arrived; the body is read here, asynchronously,
so a client that trickles its body holds a coroutine, not a thread: honest requests on other connections
are served meanwhile. A body over the limit is never kept: its Content-Length says so before a byte is
read, and a chunked body is cut as soon as it passes the limit; either is 413. The bytes already on their
way are read and dropped (at most `DRAIN_LIMIT`, within the deadline) so that the client, still sending,
can read the 413 rather than a reset connection; a client that asked `Expect: 100-continue` sends no body
and is answered at once. A body that has not arrived in full within the deadline is 408. Each refusal
closes the connection.
"""

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Protocol, TypeVar

_T = TypeVar("_T")
DRAIN_LIMIT = 64 * 1024 * 1024
"""The most of a refused body read (and dropped) so that its client can read the refusal."""


class BodySource(Protocol):
    """What of granian's RSGI HTTP protocol object reads the body: all of it, or chunk by chunk."""

    def __call__(self) -> Awaitable[bytes]: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...


class BodyRefused(Exception):
    """The body is not read; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_body(source: BodySource, content_length: str | None, *, limit: int, timeout: float,
                    expects_continue: bool = False, deadlines: "ReadDeadlines | None" = None) -> bytes:
    """The whole body, or BodyRefused (413 over `limit`, 408 past `timeout` seconds, 400 for a bad length).
    `deadlines`: the application's (one timer for all its reads); None, one for this read."""
    if deadlines is None:
        deadlines = ReadDeadlines()
    reading: Awaitable[bytes]
    if content_length is not None:
        try:
            length = int(content_length)
        except ValueError:
            raise BodyRefused(400, f"Content-Length {content_length!r} is not a number") from None
        if length > limit:
            refusal = BodyRefused(413, f"body of {length} bytes exceeds the {limit} byte limit")
            if not expects_continue and length <= DRAIN_LIMIT:
                await _drain(aiter(source), timeout, deadlines)
            raise refusal
        reading = source()  # the server stops at the declared length
    else:
        reading = _chunks_within(source, limit, timeout, deadlines)
    try:
        return await _within(reading, timeout, deadlines)
    except TimeoutError:
        raise BodyRefused(408, f"the request body did not arrive within {timeout:g}s") from None


class ReadDeadlines:
    """The deadlines of the bodies one worker is reading, behind one timer.

    A timer of its own for each read (`loop.call_later`, cancelled once the body is in: what `asyncio.timeout`
    does, without its context object) cost a 2-rule review ~2 % of its instructions, and a cancelled timer
    stays in the loop's heap until the loop next sweeps it. Here a read is an entry in a heap ordered by
    deadline, and one timer is armed for the earliest: a read that ends takes its entry back; when the timer
    fires, each read past its deadline has its task cancelled (as the timer of its own did) and the timer is
    armed again for the earliest still pending. Reads start with the same timeout, so under load the timer
    fires about once per timeout, not once per request. One per application: it follows the running loop.
    """

    __slots__ = ("_loop", "_order", "_reads", "_timer", "_when")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reads: list[list[Any]] = []
        """A heap of [deadline, order, the reading task (None once the read ended), whether it was cut off]."""
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._when = 0.0

    def add(self, task: "asyncio.Task[Any]", timeout: float) -> list[Any]:
        """The entry of a read by `task` to be cut off (its task cancelled) `timeout` seconds from now."""
        loop = task.get_loop()
        if loop is not self._loop:  # the first read, or a new loop (tests): the old loop's reads are gone
            self._loop, self._reads, self._timer = loop, [], None
        deadline = loop.time() + timeout
        entry = [deadline, next(self._order), task, False]
        heapq.heappush(self._reads, entry)
        if self._timer is None or deadline < self._when:
            self._arm(loop, deadline)
        return entry

    def done(self, entry: list[Any]) -> None:
        """The read of `entry` ended (its body read, refused, cut off or cancelled)."""
        entry[2] = None
        reads = self._reads
        while reads and reads[0][2] is None:
            heapq.heappop(reads)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._when = when
        self._timer = loop.call_at(when, self._expire)

    def _expire(self) -> None:
        loop = self._loop
        assert loop is not None  # armed by `add`, which sets it
        self._timer = None
        reads, now = self._reads, loop.time()
        while reads and (reads[0][2] is None or reads[0][0] <= now):
            entry = heapq.heappop(reads)
            task = entry[2]
            if task is not None:
                entry[3] = True
                task.cancel()
        if reads:
            self._arm(loop, reads[0][0])


async def _within(reading: Awaitable[_T], timeout: float, deadlines: ReadDeadlines) -> _T:
    """`await reading`, cut off with TimeoutError after `timeout` seconds (`ReadDeadlines`: the running task is
    cancelled, as `asyncio.timeout` does, no task of its own as `wait_for` would make). A cancellation from
    elsewhere stays a cancellation."""
    task = asyncio.current_task()
    if task is None:  # not run as a task (nothing to cancel): read without a deadline
        return await reading
    entry = deadlines.add(task, timeout)
    try:
        return await reading
    except asyncio.CancelledError:
        if entry[3] and task.uncancel() == 0:
            raise TimeoutError from None
        raise
    finally:
        deadlines.done(entry)


async def _chunks_within(source: BodySource, limit: int, timeout: float, deadlines: ReadDeadlines) -> bytes:
    chunks: list[bytes] = []
    size = 0
    body = aiter(source)  # a request's body can be iterated once: the drain goes on with the same iterator
    while (chunk := await _next_chunk(body)) is not None:
        size += len(chunk)
        if size > limit:
            chunks.clear()
            await _drain(body, timeout, deadlines, size)
            raise BodyRefused(413, f"body exceeds the {limit} byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(body: AsyncIterator[bytes], timeout: float, deadlines: ReadDeadlines, read: int = 0) -> None:
    """Read and drop the rest of a refused body, up to DRAIN_LIMIT in all, for at most `timeout` seconds."""

    async def dropping() -> None:
        size = read
        while (chunk := await _next_chunk(body)) is not None:
            size += len(chunk)
            if size > DRAIN_LIMIT:
                return

    try:
        await _within(dropping(), timeout, deadlines)
    except TimeoutError:
        return


async def _next_chunk(body: AsyncIterator[bytes]) -> bytes | None:
    """The body's next chunk, None at its end. (Not `anext(body, None)`: with it granian 2.8.7's worker
    process exited here; nor `async for`, which asks the iterator for an iterator again: granian refuses.)"""
    try:
        return await body.__anext__()
    except StopAsyncIteration:
        return None
