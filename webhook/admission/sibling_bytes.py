"""A sibling Pod's review recognised from its bytes, before it is decoded.

The API server writes the reviews of a ReplicaSet's Pods byte for byte alike but for the request uid and
the times in `managedFields` (webhook.admission.sibling_cache). Decoding a review, and encoding it again
into its cache key, were a third of the instructions of a sibling answered from the cache (docs/
performance.md); a review recognised from its bytes needs neither.

A review's *holes* are the contents of the first `"uid":"…"` string (the request's uid: the API server
writes it first) and, when `times`, of every `"time":"…"` string after it; its *shape* is the bytes between
the holes. Two reviews of one shape are the same bytes but for their holes' contents. A decided review's
shape is kept only once `proven` shows that its holes are exactly the request's uid and the times of its
`managedFields`: the review with its holes' contents replaced by marks (`~0~`, `~1~`…; outside a string a
`~` is no JSON) decodes to the same request but for those values, so each hole is the whole content of that
one string. A review is recognised only where every hole holds printable ASCII but `"` and `\\`
(`plain_holes`): each then stays the content of the same string, and the review decodes to the kept one but
for its uid and times, which is what the cache key leaves out. Any other review is decoded and keyed as
before.
"""

import re
from collections.abc import Callable
from dataclasses import replace

from webhook.engine.request import AdmissionRequest

UID = b'"uid":"'
TIME = b'"time":"'
_PLAIN = re.compile(rb'[ !#-\[\]-~]*')
"""Printable ASCII but `"` (0x22) and `\\` (0x5c): what a hole may hold for its string to stay the same."""

Holes = list[tuple[int, int]]


def plain_holes(body: bytes, *, times: bool) -> Holes | None:
    """The (start, end) of each hole of `body` (the uid's first), or None when one is not plain or the uid's
    is empty."""
    start = body.find(UID)
    if start < 0:
        return None
    start += len(UID)
    end = body.find(b'"', start)
    if end <= start or _PLAIN.fullmatch(body, start, end) is None:
        return None
    holes = [(start, end)]
    if times:
        at = body.find(TIME, end)
        while at >= 0:
            start = at + len(TIME)
            end = body.find(b'"', start)
            if end < 0 or _PLAIN.fullmatch(body, start, end) is None:
                return None
            holes.append((start, end))
            at = body.find(TIME, end)
    return holes


def shape(body: bytes, holes: Holes) -> tuple[bytes, tuple[int, ...]]:
    """The bytes between the holes, joined, and where each hole sits in them: equal for two reviews only when
    they are the same bytes but for their holes' contents."""
    parts, offsets, done, length = [], [], 0, 0
    for start, end in holes:
        parts.append(body[done:start])
        length += start - done
        offsets.append(length)
        done = end
    parts.append(body[done:])
    return b"".join(parts), tuple(offsets)


def proven(body: bytes, holes: Holes, request: AdmissionRequest, parse: Callable[[bytes], AdmissionRequest]) -> bool:
    """Whether `request`, decoded from `body`, is the same with other contents in the holes but for its uid and
    the times of its managedFields (in their order): then only those are what the holes hold."""
    parts, done = [], 0
    for index, (start, end) in enumerate(holes):
        parts.append(body[done:start] + b"~%d~" % index)
        done = end
    parts.append(body[done:])
    try:
        marked = parse(b"".join(parts))
    except ValueError:  # a hole that is no string's whole content: the marks make no JSON (ReviewError)
        return False
    if marked.uid != "~0~":
        return False
    entries, originals = _managed_fields(marked), _managed_fields(request)
    if len(entries) != len(originals):
        return False
    mark = 1
    for entry, original in zip(entries, originals, strict=True):
        if isinstance(entry, dict) and isinstance(original, dict) and "time" in original and (
                entry.get("time") == f"~{mark}~"):
            entry["time"] = original["time"]
            mark += 1
    return mark == len(holes) and replace(marked, uid=request.uid) == request


def _managed_fields(request: AdmissionRequest) -> list[object]:
    metadata = request.object.get("metadata") if request.object is not None else None
    entries = metadata.get("managedFields") if isinstance(metadata, dict) else None
    return entries if isinstance(entries, list) else []
