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
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol, TypeVar

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
                    expects_continue: bool = False) -> bytes:
    """The whole body, or BodyRefused (413 over `limit`, 408 past `timeout` seconds, 400 for a bad length)."""
    reading: Awaitable[bytes]
    if content_length is not None:
        try:
            length = int(content_length)
        except ValueError:
            raise BodyRefused(400, f"Content-Length {content_length!r} is not a number") from None
        if length > limit:
            refusal = BodyRefused(413, f"body of {length} bytes exceeds the {limit} byte limit")
            if not expects_continue and length <= DRAIN_LIMIT:
                await _drain(aiter(source), timeout)
            raise refusal
        reading = source()  # the server stops at the declared length
    else:
        reading = _chunks_within(source, limit, timeout)
    try:
        return await _within(reading, timeout)
    except TimeoutError:
        raise BodyRefused(408, f"the request body did not arrive within {timeout:g}s") from None


class _Expiry:
    """A timer's callback that cancels the task waiting for a body, and remembers that it did."""

    __slots__ = ("fired", "task")

    def __init__(self, task: "asyncio.Task[object]") -> None:
        self.task = task
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


async def _within(reading: Awaitable[_T], timeout: float) -> _T:
    """`await reading`, cut off with TimeoutError after `timeout` seconds.

    What `asyncio.timeout` does (a timer on this task that cancels it, no task of its own as `wait_for` would
    make), without its context object and state machine: those were a tenth of the Python a worker spends on
    a review answered from the sibling cache. A cancellation from elsewhere stays a cancellation."""
    task = asyncio.current_task()
    if task is None:  # not run as a task (nothing to cancel): read without a timer
        return await reading
    expiry = _Expiry(task)
    handle = asyncio.get_running_loop().call_later(timeout, expiry)
    try:
        return await reading
    except asyncio.CancelledError:
        if expiry.fired and task.uncancel() == 0:
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()


async def _chunks_within(source: BodySource, limit: int, timeout: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    body = aiter(source)  # a request's body can be iterated once: the drain goes on with the same iterator
    while (chunk := await _next_chunk(body)) is not None:
        size += len(chunk)
        if size > limit:
            chunks.clear()
            await _drain(body, timeout, size)
            raise BodyRefused(413, f"body exceeds the {limit} byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(body: AsyncIterator[bytes], timeout: float, read: int = 0) -> None:
    """Read and drop the rest of a refused body, up to DRAIN_LIMIT in all, for at most `timeout` seconds."""

    async def dropping() -> None:
        size = read
        while (chunk := await _next_chunk(body)) is not None:
            size += len(chunk)
            if size > DRAIN_LIMIT:
                return

    try:
        await _within(dropping(), timeout)
    except TimeoutError:
        return


async def _next_chunk(body: AsyncIterator[bytes]) -> bytes | None:
    """The body's next chunk, None at its end. (Not `anext(body, None)`: with it granian 2.8.7's worker
    process exited here; nor `async for`, which asks the iterator for an iterator again: granian refuses.)"""
    try:
        return await body.__anext__()
    except StopAsyncIteration:
        return None
