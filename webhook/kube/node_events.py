"""Node status updates that change nothing Placer reads, recognised from their bytes without decoding them.

Kubelets keep updating their Node's status (conditions and their heartbeat times, images); Placer reads a
node's labels, spec (taints, cordon) and `status.allocatable` (`webhook.policy.node_facts`). Decoding a
7.5 KB event to find out costs more than everything else done with it, so a MODIFIED event is compared,
as bytes, with the last decoded event of the same node on exactly those parts: the `labels` object, the
bytes from `"spec":{` to `"status":{`, and the `allocatable` object. Equal: the event only moves the
resourceVersion on. Anything unexpected in the layout (a key found where it should not be, a missing part)
means "decode it": this can make Placer decode an event it could have skipped, never skip a change.

The layout relied on is how kube-apiserver writes a Node (Go's encoding/json, compact, field order fixed by
the API types): `{"type":"MODIFIED","object":{...,"metadata":{"name":"…",…,"resourceVersion":"…",…,
"labels":{…},…},"spec":{…},"status":{…"allocatable":{…},…}}}`. Label keys and values, and quantities,
cannot contain braces or quotes, so their objects end at the first `}`.
"""

_MODIFIED = b'{"type":"MODIFIED","object":{'
_NAME = b'"metadata":{"name":"'
_VERSION = b'"resourceVersion":"'
_LABELS = b'"labels":{'
_SPEC = b'"spec":{'
_STATUS = b'"status":{'
_ALLOCATABLE = b'"allocatable":{'


class UnchangedNodeEvents:
    """`check(line)`: the resourceVersion of a Node event that changes nothing in the node's facts."""

    def __init__(self) -> None:
        self._seen: dict[bytes, bytes] = {}
        """Node name → the parts Placer reads, as bytes, of its last decoded event."""
        self.skipped = 0

    def reset(self) -> None:
        self._seen.clear()

    def check(self, line: bytes) -> str | None:
        found = line.find(_NAME, 0, 512)
        if found < 0:
            return None
        start = found + len(_NAME)
        end = line.find(b'"', start, start + 300)
        name = line[start:end]
        if end < 0 or not name or b"\\" in name:
            return None
        if not line.startswith(_MODIFIED):
            self._seen.pop(name, None)  # ADDED, DELETED, anything else: decoded, and the next one too
            if line.startswith(b'{"type":"ADDED"'):
                self._record(name, line, end)
            return None
        parts = _parts(line, end)
        if parts is None:
            self._seen.pop(name, None)
            return None
        fingerprint, version = parts
        if self._seen.get(name) == fingerprint:
            self.skipped += 1
            return version.decode()
        self._seen[name] = fingerprint
        return None

    def _record(self, name: bytes, line: bytes, start: int) -> None:
        parts = _parts(line, start)
        if parts is not None:
            self._seen[name] = parts[0]


def _parts(line: bytes, start: int) -> tuple[bytes, bytes] | None:
    """(labels + spec + allocatable bytes, resourceVersion) of a Node event, or None when the layout is not
    the one expected (then the event is decoded)."""
    spec = line.find(_SPEC, start)
    if spec < 0:
        return None
    version_at = line.find(_VERSION, start, spec)
    version_end = line.find(b'"', version_at + len(_VERSION), spec) if version_at >= 0 else -1
    version = line[version_at + len(_VERSION):version_end]
    labels = line.find(_LABELS, start, spec)
    status = line.find(_STATUS, spec)
    if version_end < 0 or not version.isdigit() or labels < 0 or status < 0:
        return None
    labels_end = line.find(b"}", labels + len(_LABELS), spec)
    # One of each where it belongs: a second `"spec":{` or `"labels":{` in metadata would be ambiguous.
    if labels_end < 0 or line.find(_SPEC, spec + 1, status) >= 0 or line.find(_LABELS, labels_end, spec) >= 0:
        return None
    allocatable = line.find(_ALLOCATABLE, status)
    allocatable_end = line.find(b"}", allocatable) if allocatable >= 0 else -1
    if allocatable < 0 or allocatable_end < 0:
        return None
    fingerprint = b"\0".join(
        (line[labels:labels_end], line[spec:status], line[allocatable:allocatable_end])
    )
    return fingerprint, version
