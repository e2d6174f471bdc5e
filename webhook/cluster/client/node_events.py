"""Node status updates that change nothing Placer reads, recognised from their bytes without decoding them.

Kubelets keep updating their Node's status (conditions and their heartbeat times, images); Placer reads a
node's labels, spec (taints, cordon) and `status.allocatable` (`webhook.policy.state.node_facts`). Decoding a
7.5 KB event to find out costs more than everything else done with it, so a MODIFIED event is compared,
as bytes, with what was last seen of the same node on exactly those parts: the `labels` object, and the
bytes from `"spec":{` to the end of the `allocatable` object (the spec, then the status's `capacity` and
`allocatable`, in that order). Equal: the event only moves the resourceVersion on.

What was last seen of a node comes from its last decoded event, or from the list (`remember`: the listed
object encoded the way the API server encodes it; when the encodings differ, the node's first event is
decoded, nothing worse). Parts are recorded only from an event whose layout was checked in full; anything
unexpected in it (a key found where it should not be, a missing part) means "decode it, every time". An
event is then skipped only when its bytes at those places are the recorded bytes, closing braces included,
so a skip can only ever be wrong if the node's facts were the same: this can make Placer decode an event it
could have skipped, never skip a change.

The layout relied on is how kube-apiserver writes a Node (Go's encoding/json, compact, field order fixed by
the API types): `{"type":"MODIFIED","object":{...,"metadata":{"name":"…",…,"resourceVersion":"…",…,
"labels":{…},…},"spec":{…},"status":{"capacity":{…},"allocatable":{…},…}}}`. Label keys and values, and
quantities, cannot contain braces or quotes, so their objects end at the first `}`; a `"key":{` found in
compact JSON is always an object-valued key of that name (quotes inside strings are escaped).
"""

from collections.abc import Mapping
from typing import Any

import orjson

_MODIFIED = b'{"type":"MODIFIED","object":{'
_ADDED = b'{"type":"ADDED","object":{'
_NAME = b'"metadata":{"name":"'
_VERSION = b'"resourceVersion":"'
_LABELS = b'"labels":{'
_SPEC = b'"spec":{'
_STATUS = b'"status":{'
_ALLOCATABLE = b'"allocatable":{'


class UnchangedNodeEvents:
    """`skip(buffer, start, end)`: whether the Node event in `buffer[start:end]` changes nothing in the
    node's facts; `take_version()`: the resourceVersion of the last event skipped since the last call."""

    def __init__(self) -> None:
        self._seen: dict[bytes, tuple[bytes, bytes]] = {}
        """Node name → (its `"labels":{…}` bytes, its `"spec":{…` … `"allocatable":{…}` bytes)."""
        self._version: bytes | None = None
        self.skipped = 0

    def reset(self) -> None:
        """Forget every node (a list follows: `remember` each listed one)."""
        self._seen.clear()
        self._version = None

    def remember(self, name: str, node: Mapping[str, Any]) -> None:
        """A listed node, as the API server would write it in an event (see the module's docstring)."""
        parts = _encoded_parts(node)
        if parts is None:
            self._seen.pop(name.encode(), None)
        else:
            self._seen[name.encode()] = parts

    def forget(self, name: str) -> None:
        """Decode this node's next event (its last one was not applied, and is coming again)."""
        self._seen.pop(name.encode(), None)

    def take_version(self) -> str | None:
        """The resourceVersion of the newest event skipped since the last call, if any."""
        version, self._version = self._version, None
        return version.decode() if version is not None else None

    def skip(self, buffer: bytes, start: int, end: int) -> bool:
        """True when the event `buffer[start:end]` (one line) can be dropped undecoded."""
        found = buffer.find(_NAME, start, start + 512)
        if found < 0:
            return False
        name_at = found + len(_NAME)
        name_end = buffer.find(b'"', name_at, name_at + 300)
        if name_end < 0:
            return False
        name = buffer[name_at:name_end]
        seen = self._seen.get(name)
        if seen is not None and buffer.startswith(_MODIFIED, start, end):
            labels, facts = seen
            labels_at = buffer.find(_LABELS, name_end, end)
            if labels_at >= 0 and buffer.startswith(labels, labels_at, end):
                spec_at = buffer.find(_SPEC, labels_at + len(labels), end)
                if spec_at >= 0 and buffer.startswith(facts, spec_at, end):
                    version_at = buffer.find(_VERSION, name_end, spec_at)
                    if version_at >= 0:
                        version_at += len(_VERSION)
                        version = buffer[version_at : buffer.find(b'"', version_at, spec_at)]
                        if version.isdigit():
                            self._version = version
                            self.skipped += 1
                            return True
        self._learn(name, buffer, start, end, name_end)
        return False

    def _learn(self, name: bytes, buffer: bytes, start: int, end: int, name_end: int) -> None:
        """Record what a decoded event says of its node (ADDED, MODIFIED), or forget it (anything else)."""
        parts = None
        if b"\\" not in name and (
            buffer.startswith(_MODIFIED, start, end) or buffer.startswith(_ADDED, start, end)
        ):
            parts = _event_parts(buffer, name_end, end)
        if parts is None:
            self._seen.pop(name, None)  # DELETED, odd layouts: decoded, and the next one too
        else:
            self._seen[name] = parts


def _event_parts(line: bytes, start: int, end: int) -> tuple[bytes, bytes] | None:
    """(labels bytes, spec-to-allocatable bytes) of a Node event whose layout is exactly the one expected,
    or None (then its events are decoded)."""
    spec = line.find(_SPEC, start, end)
    if spec < 0:
        return None
    labels = line.find(_LABELS, start, spec)
    status = line.find(_STATUS, spec, end)
    if labels < 0 or status < 0 or line.find(_VERSION, start, spec) < 0:
        return None
    labels_end = line.find(b"}", labels + len(_LABELS), spec)
    # One of each where it belongs: a second `"spec":{` or `"labels":{` in metadata would be ambiguous.
    if labels_end < 0 or line.find(_SPEC, spec + 1, status) >= 0 or line.find(_LABELS, labels_end, spec) >= 0:
        return None
    # The status must open with its capacity and allocatable, so that the bytes compared end at a known place.
    capacity_end = line.find(b"}", status, end)
    if not line.startswith(b'"capacity":{', status + len(_STATUS), end):
        return None
    allocatable = capacity_end + 2
    if capacity_end < 0 or not line.startswith(b"," + _ALLOCATABLE, capacity_end + 1, end):
        return None
    allocatable_end = line.find(b"}", allocatable, end)
    if allocatable_end < 0:
        return None
    return line[labels : labels_end + 1], line[spec : allocatable_end + 1]


def _encoded_parts(node: Mapping[str, Any]) -> tuple[bytes, bytes] | None:
    """The parts `_event_parts` finds in an event, made from a decoded (listed) node."""
    metadata, spec, status = node.get("metadata"), node.get("spec"), node.get("status")
    if not isinstance(metadata, dict) or not isinstance(spec, dict) or not isinstance(status, dict):
        return None
    labels = metadata.get("labels")
    keys = list(status)[:2]
    if not isinstance(labels, dict) or keys != ["capacity", "allocatable"]:
        return None
    try:
        return (
            b'"labels":' + orjson.dumps(labels),
            b'"spec":' + orjson.dumps(spec) + b',"status":{"capacity":' + orjson.dumps(status["capacity"])
            + b',"allocatable":' + orjson.dumps(status["allocatable"]),
        )
    except (TypeError, orjson.JSONEncodeError):
        return None
