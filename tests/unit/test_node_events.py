"""Node events that change nothing Placer reads are recognised from their bytes; every real change is decoded."""

import copy
import json
from typing import Any

import pytest

from webhook.cluster.client.node_events import UnchangedNodeEvents


def node(heartbeat: str = "2026-11-22T10:00:00Z", version: int = 100, **changes: Any) -> dict[str, Any]:
    """A Node in kube-apiserver's field order, managed fields and all (their `f:` keys must not confuse)."""
    obj: dict[str, Any] = {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {
            "name": "worker-1", "uid": "6c1d", "resourceVersion": str(version),
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {"kubernetes.io/hostname": "worker-1", "node-pool": "general"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "note": "\"spec\":{ in a value"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "time": heartbeat,
                               "fieldsType": "FieldsV1", "subresource": "status",
                               "fieldsV1": {"f:metadata": {"f:labels": {"f:node-pool": {}}},
                                            "f:spec": {"f:taints": {}}, "f:status": {"f:conditions": {}}}}],
        },
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": "kind://docker/kind/worker-1"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi"},
            "allocatable": {"cpu": "7800m", "memory": "31Gi"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
            "images": [{"names": ["registry.example/app:v1"], "sizeBytes": 1000}],
        },
    }
    for path, value in changes.items():
        target = obj
        *parents, leaf = path.split("__")
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    return obj


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


def check(events: UnchangedNodeEvents, data: bytes) -> str | None:
    """The resourceVersion of an event that is dropped, None for one that is decoded."""
    return events.take_version() if events.skip(data, 0, len(data)) else None


def test_a_status_heartbeat_is_skipped_with_its_resource_version() -> None:
    events = UnchangedNodeEvents()
    assert check(events, line("MODIFIED", node())) is None, "the first event of a node is decoded"
    assert check(events, line("MODIFIED", node(heartbeat="2026-11-22T10:00:10Z", version=101))) == "101"
    assert events.skipped == 1


@pytest.mark.parametrize("change", [
    {"metadata__labels": {"kubernetes.io/hostname": "worker-1", "node-pool": "gpu"}},
    {"spec__taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
    {"spec__unschedulable": True},
    {"status__allocatable": {"cpu": "7", "memory": "31Gi"}},
])
def test_every_change_to_what_placer_reads_is_decoded(change: dict[str, Any]) -> None:
    events = UnchangedNodeEvents()
    check(events, line("MODIFIED", node()))
    assert check(events, line("MODIFIED", node(heartbeat="2026-11-22T10:00:10Z", version=101, **change))) is None
    assert check(events, line("MODIFIED", node(heartbeat="2026-11-22T10:00:20Z", version=102, **change))) == "102"


def test_added_counts_as_seen_deleted_and_a_relist_forget() -> None:
    events = UnchangedNodeEvents()
    assert check(events, line("ADDED", node())) is None
    assert check(events, line("MODIFIED", node(version=101))) == "101"
    assert check(events, line("DELETED", node(version=102))) is None
    assert check(events, line("MODIFIED", node(version=103))) is None, "after a deletion: decoded"
    events.reset()
    assert check(events, line("MODIFIED", node(version=104))) is None, "after a list: decoded"


def test_an_unexpected_layout_is_decoded_never_skipped() -> None:
    events = UnchangedNodeEvents()
    spaced = json.dumps({"type": "MODIFIED", "object": node()}).encode()
    assert check(events, spaced) is None and check(events, spaced) is None
    odd = node()
    odd["metadata"]["annotations"]["x"] = "y"
    odd["metadata"]["labels"] = {}
    twice = copy.deepcopy(odd)
    twice["metadata"]["ownerReferences"] = [{"spec": {"labels": {}}}]  # a second "spec":{ before the spec
    assert check(events, line("MODIFIED", twice)) is None and check(events, line("MODIFIED", twice)) is None
    bookmark = b'{"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"9"}}}'
    assert check(events, bookmark) is None


def test_an_event_is_judged_where_it_lies_in_a_larger_buffer() -> None:
    events = UnchangedNodeEvents()
    first, second = line("MODIFIED", node()), line("MODIFIED", node(heartbeat="2026-11-22T10:00:10Z", version=101))
    buffer = b"1c\r\n" + first + b"\n\r\n" + b"ff\r\n" + second + b"\n\r\n"
    assert not events.skip(buffer, 4, 4 + len(first))
    start = buffer.index(second)
    assert events.skip(buffer, start, start + len(second)) and events.take_version() == "101"
    assert events.take_version() is None, "a version is handed over once"


def test_only_the_newest_dropped_version_is_kept() -> None:
    events = UnchangedNodeEvents()
    check(events, line("MODIFIED", node()))
    for version in (101, 102, 103):
        data = line("MODIFIED", node(heartbeat=f"2026-11-22T10:01:{version - 100:02d}Z", version=version))
        assert events.skip(data, 0, len(data))
    assert events.take_version() == "103"


def test_a_listed_node_is_compared_with_its_first_event() -> None:
    """The list seeds what was seen (encoded as the API server encodes it): no decode after a relist."""
    events = UnchangedNodeEvents()
    listed = node()
    events.remember("worker-1", json.loads(json.dumps(listed)))
    assert check(events, line("MODIFIED", node(heartbeat="2026-11-22T10:00:10Z", version=101))) == "101"
    relabelled = node(version=102, metadata__labels={"kubernetes.io/hostname": "worker-1", "node-pool": "gpu"})
    assert check(events, line("MODIFIED", relabelled)) is None, "what changed since the list is decoded"
    events.reset()
    events.remember("worker-1", {"metadata": {"name": "worker-1"}, "spec": {}, "status": {}})
    assert check(events, line("MODIFIED", node(version=103))) is None, "a listed node without labels: decoded"


def test_a_listed_node_encoded_differently_costs_one_decode_never_a_missed_change() -> None:
    events = UnchangedNodeEvents()
    listed = node()
    listed["spec"]["providerID"] = "aws:///eu-west-1a/i-0<1>"  # Go escapes < and >, orjson does not
    events.remember("worker-1", listed)
    event = json.dumps({"type": "MODIFIED", "object": listed}, separators=(",", ":")).encode()
    event = event.replace(b"<", b"\\u003c").replace(b">", b"\\u003e")
    assert check(events, event) is None
    assert check(events, event) is not None, "learnt from the decoded event"


def test_a_capacity_change_is_decoded() -> None:
    events = UnchangedNodeEvents()
    check(events, line("MODIFIED", node()))
    assert check(events, line("MODIFIED", node(version=101, status__capacity={"cpu": "16", "memory": "32Gi"}))) is None


def test_a_status_without_capacity_first_is_always_decoded() -> None:
    events = UnchangedNodeEvents()
    odd = node()
    odd["status"] = {"allocatable": odd["status"]["allocatable"], "capacity": odd["status"]["capacity"]}
    assert check(events, line("MODIFIED", odd)) is None and check(events, line("MODIFIED", odd)) is None
