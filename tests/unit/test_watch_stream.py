"""Watch lines cut from a chunked body read in arbitrary blocks, and every way such a stream can break."""

import io

import pytest

from webhook.kube.watch_stream import ChunkedStreamError, chunked_lines


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


def test_before_read_runs_before_every_read_but_the_first() -> None:
    calls = []
    body = chunked(b"a\n", b"b\n")
    list(chunked_lines(Blocks(split(body, 4)), 1 << 20, lambda: calls.append(1)))
    assert len(calls) == len(split(body, 4)) - 1
