"""Watch lines cut from a chunked body read in arbitrary blocks, and every way such a stream can break."""

import io
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from webhook.cluster.client.watch_stream import BLOCK, ChunkedStreamError, PacedBody, chunked_lines


class Blocks(io.RawIOBase):
    """A body that arrives in the given blocks, one per read (as TLS records do)."""

    def __init__(self, blocks: list[bytes]) -> None:
        self._blocks = list(blocks)

    def read1(self, size: int = -1, /) -> bytes:
        return self._blocks.pop(0) if self._blocks else b""


def chunked(*events: bytes) -> bytes:
    return b"".join(f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events) + b"0\r\n\r\n"


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("block", [1, 3, 7, 64, 10_000])
def test_lines_come_out_whole_and_in_order_whatever_the_blocks(block: int) -> None:
    events = [b'{"type":"ADDED","n":%d}\n' % i for i in range(20)]
    body = chunked(*events[:5], b"".join(events[5:15]), *events[15:])  # one chunk may carry several events
    assert list(chunked_lines(Blocks(split(body, block)), 1 << 20)) == [e.rstrip(b"\n") for e in events]


def test_an_event_split_over_chunks_and_extensions_are_understood() -> None:
    body = b"5;ext=1\r\n{\"a\":\r\n4\r\n 1}\n\r\n0\r\n\r\n"
    assert list(chunked_lines(Blocks([body]), 1 << 20)) == [b'{"a": 1}']


@pytest.mark.parametrize(("body", "message"), [
    (b"zz\r\n{}\r\n", "malformed chunk size"),
    (chunked(b'{"a":1}\n')[:-5], "ended in the middle"),
    (b"7\r\n{\"a\":1}\r\n0\r\n\r\n", "ended in the middle"),
])
def test_a_broken_stream_raises(body: bytes, message: str) -> None:
    with pytest.raises(ChunkedStreamError, match=message):
        list(chunked_lines(Blocks([body]), 1 << 20))


def test_an_event_over_the_limit_is_refused() -> None:
    with pytest.raises(ChunkedStreamError, match="larger than the limit"):
        list(chunked_lines(Blocks(split(chunked(b"x" * 5000), 512)), 1000))


@pytest.fixture
def connected() -> Iterator[tuple[socket.socket, socket.socket]]:
    reader, writer = socket.socketpair()
    reader.settimeout(1.0)
    try:
        yield reader, writer
    finally:
        reader.close()
        writer.close()


def test_a_paced_body_reads_what_gathered_while_it_slept(connected: tuple[socket.socket, socket.socket]) -> None:
    reader, writer = connected
    writer.sendall(b"first")
    body = PacedBody(reader.makefile("rb"), reader, pace=0.2)
    assert body.read1(BLOCK) == b"first"
    # nothing waits: the reader sleeps its pace, and what is sent meanwhile comes out in one read
    threading.Timer(0.05, writer.sendall, [b"a"]).start()
    threading.Timer(0.10, writer.sendall, [b"b"]).start()
    assert body.read1(BLOCK) == b"ab"
    writer.sendall(b"c")
    time.sleep(0.05)
    assert body.read1(BLOCK) == b"c"  # already there: read at once
    writer.close()
    assert body.read1(BLOCK) == b""  # the end of the stream


def test_a_paced_body_waits_for_a_late_event_up_to_the_idle_limit(
    connected: tuple[socket.socket, socket.socket],
) -> None:
    reader, writer = connected
    writer.sendall(b"x")
    body = PacedBody(reader.makefile("rb"), reader, pace=0.01)
    body.read1(BLOCK)
    threading.Timer(0.3, writer.sendall, [b"late"]).start()
    assert body.read1(BLOCK) == b"late"
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        body.read1(BLOCK)
    assert 0.9 < time.monotonic() - began < 3.0


@pytest.mark.parametrize("block", [2, 9, 10_000])
def test_blank_chunks_are_dropped_and_whole_chunks_follow_a_split_event(block: int) -> None:
    body = chunked(b"\n", b'{"a":', b'1}\n', b"  \n", b'{"b":2}\n', b'{"c":3}\n{"d":4}\n', b'{"e":5}\n')
    assert list(chunked_lines(Blocks(split(body, block)), 1 << 20)) == [
        b'{"a":1}', b'{"b":2}', b'{"c":3}', b'{"d":4}', b'{"e":5}'
    ]


def skip_odd(buffer: bytes, start: int, end: int) -> bool:
    """Drops the events whose number is odd (`{"n":1}`…), judged where they lie."""
    return buffer.startswith(b'{"n":', start, end) and buffer[end - 2] in b"13579"


@pytest.mark.parametrize("block", [3, 11, 10_000])
def test_skipped_events_never_come_out_and_an_empty_line_marks_each_read_that_dropped_some(block: int) -> None:
    events = [b'{"n":%d}\n' % i for i in range(10)]
    body = chunked(*events[:6], b"".join(events[6:]))  # whole chunks, then several events in one chunk
    lines = list(chunked_lines(Blocks(split(body, block)), 1 << 20, skip_odd))
    assert [line for line in lines if line] == [b'{"n":%d}' % i for i in range(0, 10, 2)]
    assert b"" in lines, "a reader of nothing but dropped events still gets a chance to stop"
    whole = list(chunked_lines(Blocks([chunked(events[1], events[3])]), 1 << 20, skip_odd))
    assert whole == [b""], "one read, all dropped: one empty line"
